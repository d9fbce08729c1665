"""Opening a data dir without writing to it: the read-only view that ``consume``, ``status``... use.

Loading a partition writes: a crashed log is recovered (torn batches truncated, indexes rebuilt), the active
segment's indexes are resized, stray files are deleted, snapshots are taken. A command that only reads must do
none of that to the data dir it was pointed at, yet see exactly what a writer would after loading it.

So a read-only log is loaded from a private scratch copy of its partition dir (removed on close, or by the next
reader's sweep when a reader was killed: :mod:`local.scratch`): every ``.log`` file is a symbolic link to the
original, opened ``O_RDONLY`` (the kernel refuses any write through it; recovery bounds a torn segment in memory
instead of truncating it, see :meth:`local.file_records.FileRecords.truncate_to`); the index files are copied
(recovery and resizing write them in place), so what the loader writes lands in the copy, and copied sparse (only
the blocks the file has: an active segment's index is preallocated to ``segment.index.bytes``, mostly holes); the
other files the loader reads (snapshots, checkpoints, ``partition.metadata``, ``remote-log-state``, topic config),
which are only ever replaced whole by a rename or deleted, are hard links where the filesystem allows (a fifteenth
of a copy's cost), else copies. ``.deleted`` files are left out (they are gone to readers already), and so are the
transient ``.tmp`` files of an interrupted atomic write.

Where: a scratch copy is made of small files, each created and soon deleted again, which a disk file system pays
for in its journal (on a virtual disk, ~0.5 ms a file: most of a partition's open). So the copies go to a memory
file system where there is one (``/dev/shm`` on Linux, unless ``TMPDIR`` names a temp dir of the user's choice; the
environment variable ``TIERED_MEMORY_TEMPDIR`` names another, or none when empty), up to
:data:`MEMORY_SCRATCH_BYTES` of copied blocks per manager (the index files of a large partition are megabytes a
gigabyte of log) and while it has room: the partitions past that (or that find it full while they are copied or
loaded), and the remote tier's caches (:func:`disk_scratch_dir`), go under the system temp dir.

Nothing here takes the data dir's lock: a reader may run beside the writer that holds it. It sees the files as
they were when it opened them (a log end offset fixed at load); segments a running writer deletes afterwards
stay readable through the open descriptors until the reader closes.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from local import filenames
from local.scratch import ScratchDir

PREFIX = "tiered-read-only-"
MIB = 1024 * 1024
MEMORY_SCRATCH_BYTES = 64 * 1024 * 1024
"""The most bytes (blocks copied) one read-only manager keeps on the memory file system."""


@dataclass
class _Scratch:
    """One read-only manager's scratch dirs: the first (its root), on the memory file system where there is one;
    one under the system temp dir, made when first needed."""

    root: ScratchDir
    in_memory: bool
    memory_bytes: int = 0  # blocks copied into the root so far (in_memory)
    disk: ScratchDir | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def disk_path(self) -> Path:
        with self.lock:
            if not self.in_memory:
                return self.root.path
            if self.disk is None:
                self.disk = ScratchDir(PREFIX)
            return self.disk.path

    def cleanup(self) -> None:
        self.root.cleanup()
        if self.disk is not None:
            self.disk.cleanup()


_roots: dict[Path, _Scratch] = {}
_roots_lock = threading.Lock()


MEMORY_TEMPDIR_ENV = "TIERED_MEMORY_TEMPDIR"


def memory_temp_dir() -> Path | None:
    """The memory file system scratch copies go to first (module docstring): the directory ``TIERED_MEMORY_TEMPDIR``
    names (empty: none), else ``/dev/shm`` on Linux unless ``TMPDIR`` is set; None when it is not a writable
    directory."""
    named = os.environ.get(MEMORY_TEMPDIR_ENV)
    if named is not None:
        where = Path(named) if named else None
    elif sys.platform.startswith("linux") and not os.environ.get("TMPDIR"):
        where = Path("/dev/shm")
    else:
        where = None
    return where if where is not None and where.is_dir() and os.access(where, os.W_OK | os.X_OK) else None


def make_scratch_root() -> Path:
    """A fresh private directory for the scratch copies of one read-only manager (a :class:`local.scratch.ScratchDir`:
    what a killed reader leaves, the next one sweeps), on the memory file system where there is one."""
    memory = memory_temp_dir()
    try:
        scratch = _Scratch(ScratchDir(PREFIX, root=memory), True) if memory is not None else None
    except OSError:  # full, or not ours after all: the system temp dir
        scratch = None
    if scratch is None:
        scratch = _Scratch(ScratchDir(PREFIX), False)
    with _roots_lock:
        _roots[scratch.root.path] = scratch
    return scratch.root.path


def disk_scratch_dir(scratch_root: Path) -> Path:
    """A private directory under the system temp dir that goes with ``scratch_root`` (removed with it): for what
    may grow large, as the remote tier's index cache of a read-only manager."""
    with _roots_lock:
        scratch = _roots.get(scratch_root)
    return scratch.disk_path() if scratch is not None else scratch_root


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def scratch_partition_dir(source: Path, scratch_root: Path, *, on_disk: bool = False) -> Path:
    """A scratch copy of partition dir ``source`` under ``scratch_root``, or under its companion on disk
    (:func:`disk_scratch_dir`) when ``on_disk``, or when the copy would take the manager past
    :data:`MEMORY_SCRATCH_BYTES` on the memory file system, or would not fit in what it has free (a container's
    ``/dev/shm`` is 64 MiB by default, shared), or ran out of space there (module docstring)."""
    entries = [e for e in os.scandir(source) if e.is_file(follow_symlinks=False)]
    with _roots_lock:
        scratch = _roots.get(scratch_root)
    in_memory = False
    if scratch is not None and scratch.in_memory:
        if not on_disk:
            needed = sum(e.stat(follow_symlinks=False).st_blocks * 512 for e in entries if not _is_log(e.name))
            with scratch.lock:
                in_memory = (scratch.memory_bytes + needed <= MEMORY_SCRATCH_BYTES
                             and _free_bytes(scratch.root.path) >= 2 * needed + MIB)  # and the loader's writes
                if in_memory:
                    scratch.memory_bytes += needed
        if not in_memory:
            scratch_root = scratch.disk_path()
    target = scratch_root / source.parent.name.replace(os.sep, "_") / source.name
    try:
        _fill(source, target, entries)
    except OSError as exc:
        if not in_memory or exc.errno not in NO_SPACE:
            raise
        shutil.rmtree(target, ignore_errors=True)  # the memory file system filled up meanwhile: on disk instead
        return scratch_partition_dir(source, scratch_root, on_disk=True)
    return target


def _free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _fill(source: Path, target: Path, entries: list[os.DirEntry[str]]) -> None:
    """Make ``target`` the scratch copy of ``source`` (its listing ``entries``): module docstring."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in entries:
        name = entry.name
        if name.endswith(filenames.DELETED_FILE_SUFFIX) or name.endswith(".tmp"):
            continue
        if _is_log(name):
            os.symlink(os.path.abspath(entry.path), target / name)  # a relative data dir must not break it
        elif any(suffix in name for suffix in filenames.INDEX_SUFFIXES):  # also .index.swap, .timeindex.cleaned...
            _copy(entry.path, os.path.join(target, name))
        else:
            _link_or_copy(entry.path, os.path.join(target, name))


def _is_log(name: str) -> bool:
    return name.endswith(filenames.LOG_FILE_SUFFIX) or filenames.LOG_FILE_SUFFIX + "." in name


def _link_or_copy(source: str, target: str) -> None:
    """A hard link to a file the loader only reads, deletes or replaces whole (producer snapshots, checkpoints,
    ``partition.metadata``, ``remote-log-state``: every write of them is a rename of a new file,
    :func:`local.checkpoint.atomic_write`), so the scratch copy can never change the original, and the writer's own
    replacements do not change the reader's view either. A copy where a link cannot be made (another filesystem)."""
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        _copy(source, target)


def _copy(source: str, target: str) -> None:
    """Copy a file's bytes and times (what the loader may look at): ``shutil.copy2`` without its buffered opens,
    permission and extended-attribute copies, which made up most of a read-only open of a partition of small
    files (``bench/RESULTS.md``); sparse: the holes of the source (a preallocated index's) stay holes."""
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(src)
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            for start, end in _data_extents(src, st.st_size):
                os.lseek(dst, start, os.SEEK_SET)
                copied = start
                while copied < end:
                    n = os.sendfile(dst, src, copied, end - copied)
                    if n == 0:  # the file shrank meanwhile (a writer truncating it): what is there is the copy
                        break
                    copied += n
            os.ftruncate(dst, st.st_size)  # holes up to the source's length (a shrunk source: its old length)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges of ``fd``'s first ``size`` bytes that hold data (the rest are holes, zeros to a
    reader); the whole file where the file system cannot tell (no ``SEEK_DATA``)."""
    extents: list[tuple[int, int]] = []
    position = 0
    try:
        while position < size:
            try:
                start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data past position
                    break
                raise
            if start >= size:
                break
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            extents.append((start, end))
            position = end
    except (OSError, AttributeError):  # no SEEK_DATA here: every byte
        return [(0, size)] if size else []
    return extents


def remove_scratch_root(scratch_root: Path) -> None:
    """Remove a read-only manager's scratch dirs (:func:`make_scratch_root`'s, and its companion on disk)."""
    with _roots_lock:
        scratch = _roots.pop(scratch_root, None)
    if scratch is not None:
        scratch.cleanup()
    else:
        shutil.rmtree(scratch_root, ignore_errors=True)
