"""Kafka's small text files: checkpoints, ``partition.metadata`` and the clean-shutdown marker.

Checkpoint layout (Kafka's ``CheckpointFile``): line 1 the version (0), line 2 the entry count, then one entry a
line, each ``\\n``-terminated: ``epoch startOffset`` (leader-epoch-checkpoint) or ``topic partition offset``
(recovery-point, log-start-offset, replication-offset checkpoints). A checkpoint is replaced through
``<name>.tmp``, fsync and rename, so a crash leaves the old or the new file, never a mix. Wrong version, wrong
count or a malformed line is a ``CorruptCheckpointError``; an empty file reads as empty.

``partition.metadata`` is exactly ``version: 0\\ntopic_id: <22-char url-safe base64 UUID>`` with no trailing newline.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from local.errors import CorruptCheckpointError, KafkaStorageError

T = TypeVar("T")
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


# Pure codecs ---------------------------------------------------------------------------------------------

def encode_checkpoint(lines: Iterable[str], version: int = CURRENT_VERSION) -> str:
    body = list(lines)
    return "".join(f"{line}\n" for line in [str(version), str(len(body)), *body])


def decode_checkpoint(text: str, parse: Callable[[str], T], source: str = "checkpoint") -> list[T]:
    if text == "":
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{source}: expected a version and an entry count, got {len(lines)} line(s)", path=source)
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(f"{source}: malformed version line {lines[0]!r}", path=source) from None
    if version != CURRENT_VERSION:
        raise CorruptCheckpointError(f"{source}: unrecognized version {version} (expected {CURRENT_VERSION})", path=source)
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{source}: malformed entry count line {lines[1]!r}", path=source) from None
    entries = lines[2:]
    if count != len(entries):
        raise CorruptCheckpointError(
            f"{source}: expected {count} entries but found {len(entries)}", path=source, expected=count
        )
    out = []
    for n, line in enumerate(entries, 3):
        try:
            out.append(parse(line))
        except (ValueError, IndexError):
            raise CorruptCheckpointError(f"{source}: malformed line {n}: {line!r}", path=source, line=n) from None
    return out


def _parse_epoch(line: str) -> EpochEntry:
    epoch, offset = line.split(" ")
    return EpochEntry(int(epoch), int(offset))


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    return encode_checkpoint(f"{e.epoch} {e.start_offset}" for e in entries).encode()


def decode_leader_epoch_checkpoint(data: bytes, source: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
    return decode_checkpoint(_text(data, source), _parse_epoch, source)


def _text(data: bytes, source: str) -> str:
    """``data`` as UTF-8; a CorruptCheckpointError naming ``source`` when it is not."""
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{source}: not a text file ({exc})", path=source) from None


def _parse_offset(line: str) -> tuple[tuple[str, int], int]:
    topic, partition, offset = line.split(" ")
    return (topic, int(partition)), int(offset)


def kafka_uuid_to_str(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def kafka_uuid_from_str(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"a Kafka UUID is 22 base64url characters, got {text!r}")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


# Files ---------------------------------------------------------------------------------------------------

def atomic_write(path: Path, data: bytes, sync: bool = True) -> None:
    """Write ``path`` through ``<path>.tmp`` and a rename; with ``sync``, fsync the file and then the directory.

    Without ``sync`` the caller makes the file durable later with :func:`fsync_file` (Kafka writes the
    producer snapshot of a roll that way: the fsync runs on the scheduler, not under the log lock).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        _fsync_dir(path.parent)


def exclusive_write(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` whole, only if no file has that name: the bytes go to a unique temp file
    (fsynced), which is then hard-linked into place (``link`` refuses an existing name atomically, where a rename
    would replace it), and the directory is fsynced. ``FileExistsError`` when the name exists; the temp file is
    removed either way."""
    import tempfile

    head = path.name.encode("utf-8", "surrogateescape")[:200].decode("utf-8", "ignore")  # the temp name fits too
    fd, tmp = tempfile.mkstemp(prefix=f".{head}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path)
        _fsync_dir(path.parent)
    finally:
        os.unlink(tmp)


def fsync_file(path: Path) -> bool:
    """fsync ``path`` and its directory; False when the file is gone (deleted meanwhile: nothing to keep)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(path.parent)
    return True


def fsync_dir(directory: Path) -> None:
    """fsync a directory: the renames and creations in it are durable."""
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class CheckpointFile(Generic[T]):
    """``sync=False``: writes are not fsynced (a read-only log's scratch copy: nothing there needs to survive)."""

    def __init__(self, path: str | os.PathLike[str], encode: Callable[[T], str], parse: Callable[[str], T],
                 sync: bool = True) -> None:
        self.path = Path(path)
        self._encode = encode
        self._parse = parse
        self._sync = sync

    def write(self, entries: Iterable[T]) -> None:
        atomic_write(self.path, encode_checkpoint(self._encode(e) for e in entries).encode(), sync=self._sync)

    def read(self) -> list[T]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return decode_checkpoint(_text(data, str(self.path)), self._parse, str(self.path))


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    def __init__(self, path: str | os.PathLike[str], sync: bool = True) -> None:
        super().__init__(path, lambda e: f"{e.epoch} {e.start_offset}", _parse_epoch, sync)


class OffsetCheckpointFile:
    """``topic partition offset`` checkpoints, as a mapping (topic, partition) -> offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(
            path, lambda e: f"{e[0][0]} {e[0][1]} {e[1]}", _parse_offset
        )
        self.path = self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        return dict(self._file.read())


class PartitionMetadataFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists()

    @staticmethod
    def encode(topic_id: uuid.UUID) -> bytes:
        if topic_id.int == 0:
            raise ValueError("the zero UUID is not a valid topic id")
        return f"version: 0\ntopic_id: {kafka_uuid_to_str(topic_id)}".encode()

    @staticmethod
    def decode(data: bytes, source: str = "partition.metadata") -> uuid.UUID:
        try:
            lines = data.decode().split("\n")
            key, _, version = lines[0].partition(": ")
            if key != "version" or int(version) != 0:
                raise ValueError(f"unsupported version line {lines[0]!r}")
            key, _, text = lines[1].partition(": ")
            if key != "topic_id":
                raise ValueError(f"expected topic_id, got {lines[1]!r}")
            topic_id = kafka_uuid_from_str(text.strip())
        except (IndexError, ValueError) as exc:  # (UnicodeDecodeError and binascii.Error are ValueErrors)
            raise KafkaStorageError(f"malformed {source}: {exc}", path=source) from None
        if topic_id.int == 0:
            raise KafkaStorageError(f"{source} holds the zero UUID, which is not a valid topic id", path=source)
        return topic_id

    def read(self) -> uuid.UUID:
        return self.decode(self.path.read_bytes(), str(self.path))

    def write(self, topic_id: uuid.UUID) -> None:
        atomic_write(self.path, self.encode(topic_id))


class CleanShutdownFile:
    """``.kafka_cleanshutdown``: ``{"version":0,"brokerEpoch":N}``; its presence skips recovery at start."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists()

    def write(self, broker_epoch: int = 0) -> None:
        atomic_write(self.path, json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode())

    def read(self) -> int:
        try:
            return int(json.loads(self.path.read_text())["brokerEpoch"])
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise KafkaStorageError(f"malformed clean shutdown file {self.path}: {exc}", path=str(self.path)) from None

    def delete(self) -> None:
        """Remove the marker, durably: the start that removes it is about to change files it vouches for."""
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
