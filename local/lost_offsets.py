"""``tiered-lost-offsets``: the offset ranges a recovery cut out of the middle of a partition's log.

Kafka's loader recovers a segment whose index is corrupt even below the recovery point, and keeps the segments
after it: a closed segment cut short by hand (or by a disk) is truncated at its first invalid byte and the log
goes on at the next segment's base offset, leaving a hole nothing records. Here the later segments are kept too
(they are intact: no more is lost than was damaged), and the hole is recorded in this file of the partition dir,
so that it is never silent: the loader logs an ERROR naming the operator's file and the range, ``tiered verify``
reports every recorded range as a problem (``lost_offsets``, exit 1), and a read of an offset in one raises
:class:`local.errors.LostOffsetsError` (``tiered consume`` prints it in one line and exits 1; ``tiered run``'s HTTP
read answers ``410 Gone`` with the range and the offset to read on from). Reads never answer an offset in a
recorded hole with the next batch, as they do for a gap compaction left.

Layout (Kafka's checkpoint text format, see :mod:`local.checkpoint`)::

    0                                              version
    1                                              entry count
    1013 1999 962 00000000000000001000.log         first lost offset, last lost offset, the byte the segment
                                                   was cut at, the segment's file name

``first..last`` is what the segment held past its last valid batch up to the next segment's base offset (for a
compacted topic some of those offsets may have been gone already). The file is replaced through ``.tmp``, fsync
and rename (a crash leaves the old or the new one); a missing file is no hole. Entries are dropped once the log
start offset passes them (retention, delete-records) or a truncation removes their offsets. A read-only view
(``consume``, ``status``) records what its load finds in memory only. This module is the codec and the set;
when a range is recorded is the loader's business (:mod:`local.loader`), what a read does the log's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from local.checkpoint import CheckpointFile
from local.filenames import LOST_OFFSETS_FILENAME

__all__ = ["LOST_OFFSETS_FILENAME", "LostOffsets", "LostOffsetsFile", "LostOffsetsSet", "read_lost_offsets"]


@dataclass(frozen=True, slots=True)
class LostOffsets:
    """Offsets ``first_offset..last_offset`` (inclusive) lost when ``segment`` (a file name in the partition dir) was
    cut at byte ``position`` by a recovery."""

    first_offset: int
    last_offset: int
    position: int
    segment: str

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset or self.position < 0 or not self.segment or " " in self.segment:
            raise ValueError(f"invalid lost offsets entry {self.first_offset} {self.last_offset} {self.position} "
                             f"{self.segment!r}")

    def holds(self, offset: int) -> bool:
        return self.first_offset <= offset <= self.last_offset

    def line(self) -> str:
        return f"{self.first_offset} {self.last_offset} {self.position} {self.segment}"


def _parse(line: str) -> LostOffsets:
    first, last, position, segment = line.split(" ")
    return LostOffsets(int(first), int(last), int(position), segment)


def read_lost_offsets(path: str | os.PathLike[str]) -> list[LostOffsets]:
    """The entries of a lost-offsets file at ``path`` (whatever its name: ``tiered dump`` reads copies too)."""
    return CheckpointFile(path, LostOffsets.line, _parse).read()


class LostOffsetsFile:
    """The ``tiered-lost-offsets`` file of one partition dir."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[LostOffsets] = CheckpointFile(
            Path(directory) / LOST_OFFSETS_FILENAME, LostOffsets.line, _parse)
        self.path = self._file.path

    def read(self) -> list[LostOffsets]:
        """The recorded ranges (none when there is no file); CorruptCheckpointError naming the file when malformed."""
        return self._file.read()

    def write(self, entries: list[LostOffsets]) -> None:
        """Replace the file (removed when ``entries`` is empty)."""
        if entries:
            self._file.write(entries)
        else:
            self.path.unlink(missing_ok=True)


class LostOffsetsSet:
    """A partition's recorded holes, published as one immutable tuple (lock-free readers), persisted on every
    change unless ``read_only``. Mutations are the log's (under its lock) and the loader's."""

    __slots__ = ("_entries", "_file", "_read_only", "_recorded")

    def __init__(self, directory: str | os.PathLike[str], read_only: bool) -> None:
        self._file = LostOffsetsFile(directory)
        self._read_only = read_only
        self._entries: tuple[LostOffsets, ...] = tuple(self._file.read())
        self._recorded = frozenset(self._entries)  # on disk (a read-only view's own findings are not)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def entries(self) -> tuple[LostOffsets, ...]:
        return self._entries

    def is_recorded(self, entry: LostOffsets) -> bool:
        """Whether ``entry`` is in the file (False for what a read-only view found and kept in memory)."""
        return entry in self._recorded

    def find(self, offset: int) -> LostOffsets | None:
        """The recorded range holding ``offset``, if any."""
        for entry in self._entries:
            if entry.holds(offset):
                return entry
        return None

    def overlapping(self, start: int, end: int) -> LostOffsets | None:
        """The first recorded range holding an offset in ``[start, end)``, if any."""
        for entry in self._entries:
            if entry.first_offset < end and entry.last_offset >= start:
                return entry
        return None

    def add(self, entry: LostOffsets) -> None:
        self._publish(sorted({*self._entries, entry}, key=lambda e: (e.first_offset, e.last_offset)))

    def drop_below(self, log_start_offset: int) -> None:
        """Forget the ranges wholly below the log start offset (retention removed what was around them)."""
        kept = [e for e in self._entries if e.last_offset >= log_start_offset]
        if len(kept) != len(self._entries):
            self._publish(kept)

    def truncate_from(self, offset: int) -> None:
        """Forget the offsets at and after ``offset`` (a truncation removed them: they will be written anew)."""
        kept = []
        for e in self._entries:
            if e.first_offset >= offset:
                continue
            kept.append(e if e.last_offset < offset else LostOffsets(e.first_offset, offset - 1, e.position, e.segment))
        if kept != list(self._entries):
            self._publish(kept)

    def clear(self) -> None:
        if self._entries:
            self._publish([])

    def _publish(self, entries: list[LostOffsets]) -> None:
        if not self._read_only:
            self._file.write(entries)
            self._recorded = frozenset(entries)
        self._entries = tuple(entries)
