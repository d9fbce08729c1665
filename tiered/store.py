"""ObjectStore: the five methods a remote tier's storage needs, and what it declares it can do beyond them.

A store moves bytes under keys; :class:`tiered.backends.composed.ObjectStoreRemoteStorageManager` composes one with
the segment format (plain or manifest layout, checksums, compression, encryption) and is the RemoteStorageManager.
The metadata store (``remote.log.metadata.manager.class.name=bucket``), ``tiered verify --remote``, ``tiered keys
rotate``, ``tiered attach`` and the copier process work on a store directly.

The minimal store implements :meth:`ObjectStore.put`, :meth:`~ObjectStore.get_range`, :meth:`~ObjectStore.size`,
:meth:`~ObjectStore.list` and :meth:`~ObjectStore.delete` (and may override :meth:`~ObjectStore.configure`, which
receives its settings with their prefix stripped); everything else has a default written on those five. A store
that can do more says so in :attr:`ObjectStore.capabilities` (never found out by probing) and overrides the method
that goes with it:

``streams``
    :meth:`~ObjectStore.open_range` returns a stream that reads from the store as it is read (the segment cache then
    serves a sequential reader from one open fetch per segment).
``multipart``
    :meth:`~ObjectStore.put_stream` uploads as the chunks come, a few parts in memory (the default spools them to a
    temporary file first, then calls :meth:`~ObjectStore.put` with it).
``conditional_writes``
    ``put(key, data, if_absent=True)`` is atomic: of two writers racing to create one key, exactly one succeeds
    (S3's ``If-None-Match: *``, an exclusive create on a filesystem). Without it, :func:`put_if_absent` checks for
    the key and writes it under a lock of this process: safe between the threads of one process, **not** between
    processes or machines, so partition ownership (:mod:`tiered.ownership`) warns that it cannot fence two brokers
    claiming one partition at the same moment on such a store. A store that does not declare it is never passed
    ``if_absent=True``.
``shared_across_processes``
    another process configured alike sees the same objects (a directory, a bucket; not an in-memory dict): the
    copier process (``remote.log.manager.copier.process.enable``) is used only then.
"""

from __future__ import annotations

import builtins
import io
import tempfile
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, BinaryIO, ClassVar

from tiered.errors import ObjectExistsError, ObjectNotFoundError

__all__ = ["ObjectStore", "StoreCapabilities", "get_all", "not_found", "put_if_absent"]


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store can do beyond the five methods (see the module docstring); all False by default."""

    streams: bool = False
    multipart: bool = False
    conditional_writes: bool = False
    shared_across_processes: bool = False
    common_prefixes: bool = False


class ObjectStore(ABC):
    """Objects under string keys (``/``-separated; see :mod:`tiered.layout`). Subclass it and implement the five
    abstract methods; errors are :class:`tiered.errors.ObjectNotFoundError` for a missing key and a
    :class:`tiered.errors.RemoteStorageError` (or an OSError) for anything else. Methods are called from several
    threads at once (copies upload objects in parallel; :func:`get_all` reads a listing's objects so)."""

    capabilities: StoreCapabilities = StoreCapabilities()
    #: the settings :meth:`configure` reads, and the prefixes of families of them (for the generated docs)
    CONFIG_KEYS: tuple[str, ...] = ()
    CONFIG_KEY_PREFIXES: tuple[str, ...] = ()
    #: each of those (``<prefix>*`` for a family) -> (default, valid values, description), for the docs
    CONFIG_DOCS: ClassVar[Mapping[str, tuple[str, str, str]]] = {}

    def __repr__(self) -> str:  # what messages name the store by; a store with a location says it in its own
        return f"{type(self).__module__}.{type(self).__qualname__}()"

    def configure(self, props: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receive the store's settings (``rsm.config.store.*`` with that prefix stripped, for a store named by
        ``rsm.config.store.class``)."""

    @abstractmethod
    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        """Write ``data`` (bytes, or a binary file object read to its end) as ``key``, replacing what was there.
        With ``if_absent`` (only passed when :attr:`capabilities` declares ``conditional_writes``): raise
        :class:`tiered.errors.ObjectExistsError` when ``key`` exists."""

    @abstractmethod
    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        """Bytes ``[start, end_inclusive]`` of ``key`` (fewer when the object ends first);
        :class:`tiered.errors.ObjectNotFoundError` when it does not exist."""

    @abstractmethod
    def size(self, key: str) -> int:
        """The object's length in bytes; :class:`tiered.errors.ObjectNotFoundError` when it does not exist."""

    @abstractmethod
    def list(self, prefix: str) -> Iterable[str]:
        """Every key that begins with ``prefix`` (a string prefix, not a directory), in any order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is fine."""

    # Written on the five; a store may override them (faster, or declared in its capabilities) --------------------
    def get(self, key: str) -> bytes:
        """The whole object."""
        size = self.size(key)
        return self.get_range(key, 0, size - 1) if size else b""

    def open_range(self, key: str, start: int, end_inclusive: int | None = None) -> IO[bytes]:
        """A readable stream of bytes ``[start, end_inclusive]`` (to the end when None): the range read at once,
        unless the store declares ``streams``."""
        if end_inclusive is None:
            end_inclusive = self.size(key) - 1
        if end_inclusive < start:
            return io.BytesIO(b"")
        return io.BytesIO(self.get_range(key, start, end_inclusive))

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        """Upload the concatenation of ``chunks`` as ``key``: spooled to a temporary file, then :meth:`put` (a store
        that declares ``multipart`` uploads parts as they come)."""
        with tempfile.TemporaryFile(prefix="tiered-upload-") as spool:
            for chunk in chunks:
                spool.write(chunk)
            spool.seek(0)
            self.put(key, spool)

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except FileNotFoundError:  # ObjectNotFoundError is one; so is a store's own "no such file"
            return False
        return True

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def list_keys(self, prefix: str) -> builtins.list[str]:
        """:meth:`list`, sorted."""
        return sorted(self.list(prefix))

    def list_common_prefixes(self, prefix: str) -> builtins.list[str]:
        """A "directory" listing, sorted: the distinct ``prefix + part + "/"`` of the keys that begin with ``prefix``
        and go on past a ``/`` (S3's ``CommonPrefixes`` with delimiter ``/``). From :meth:`list` by default; a store
        that can ask for it declares ``common_prefixes`` and overrides it (S3: one request a thousand names, not one
        a thousand keys below them)."""
        found = set()
        for key in self.list(prefix):
            cut = key.find("/", len(prefix))
            if cut >= 0:
                found.add(key[:cut + 1])
        return sorted(found)

    def check_access(self) -> None:  # noqa: B027 - optional hook
        """Fail fast, naming what is wrong, when the store cannot be reached (an endpoint, a bucket, credentials):
        the CLI calls it once before it works. Nothing by default."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads."""


def not_found(key: str, where: str = "the remote store") -> ObjectNotFoundError:
    return ObjectNotFoundError(f"no object {key!r} in {where}", key=key)


_EMULATION_LOCKS: weakref.WeakKeyDictionary[ObjectStore, threading.Lock] = weakref.WeakKeyDictionary()
_EMULATION_GUARD = threading.Lock()


def put_if_absent(store: ObjectStore, key: str, data: bytes) -> None:
    """Create ``key`` only if it does not exist: :class:`tiered.errors.ObjectExistsError` when it does. Atomic where
    the store declares ``conditional_writes``; otherwise a check and a write under a lock of this process (see the
    module docstring for what that does not guard against)."""
    if store.capabilities.conditional_writes:
        store.put(key, data, if_absent=True)
        return
    with _EMULATION_GUARD:
        lock = _EMULATION_LOCKS.setdefault(store, threading.Lock())
    with lock:
        if store.exists(key):
            raise ObjectExistsError(f"object {key!r} exists already in {store!r}", key=key)
        store.put(key, data)


#: GETs :func:`get_all` keeps in flight at once, in the whole process.
PARALLEL_GETS = 16
_getters: ThreadPoolExecutor | None = None
_getters_lock = threading.Lock()


def get_all(store: ObjectStore, keys: Sequence[str]) -> dict[str, bytes | Exception]:
    """Each key's whole object, or the exception its GET raised, with up to :data:`PARALLEL_GETS` GETs in flight: a
    partition's metadata events, read one after another, took ``tiered status`` 21 s for 1,799 segments on S3 (each
    GET a round trip, none of them a transfer). One pool for the process: a start loads many partitions at once (ten
    claim threads), and sixteen GETs each overflowed the S3 client's connection pool ("Connection pool is full")."""
    global _getters

    def one(key: str) -> bytes | Exception:
        try:
            return store.get(key)
        except Exception as exc:
            return exc

    if len(keys) < 2:
        return {key: one(key) for key in keys}
    with _getters_lock:
        if _getters is None:
            _getters = ThreadPoolExecutor(PARALLEL_GETS, thread_name_prefix="store-get")
        pool = _getters
    return dict(zip(keys, pool.map(one, keys), strict=True))


def read_all(data: bytes | BinaryIO) -> bytes:
    """``put``'s data as bytes (a file object read to its end)."""
    return bytes(data) if isinstance(data, bytes | bytearray | memoryview) else data.read()
