"""LogSegments: a partition's segments ordered by base offset (Kafka's ``LogSegments``).

Copy-on-write: mutations (under the log's lock) publish new lists, so reader threads iterate a consistent
snapshot without locking. The base offsets and the segments are published together, as ONE tuple assigned in
one step: a reader that took the bases of one version and the segments of the next would pair an offset with
the wrong segment (a read at offset 9 served from the segment at 1024, once the first segment was removed).
A lookup below the first segment finds no floor segment (None): the caller reports it out of range, it never
falls through to the next segment.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable

from local.segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (base offsets, segments): one immutable snapshot, replaced whole by every mutation.
        self._state: tuple[list[int], list[LogSegment]] = ([], [])

    def add(self, segment: LogSegment) -> None:
        """Add ``segment``, replacing any segment with the same base offset."""
        with self._lock:
            bases, segs = list(self._state[0]), list(self._state[1])
            i = bisect.bisect_left(bases, segment.base_offset)
            if i < len(bases) and bases[i] == segment.base_offset:
                segs[i] = segment
            else:
                bases.insert(i, segment.base_offset)
                segs.insert(i, segment)
            self._state = (bases, segs)

    def add_all(self, segments: Iterable[LogSegment]) -> None:
        """:meth:`add` of each segment, publishing one new list: loading 10,000 segments one :meth:`add` at a time
        copies the list 10,000 times."""
        with self._lock:
            by_base = dict(zip(*self._state, strict=True))
            for segment in segments:
                by_base[segment.base_offset] = segment
            bases = sorted(by_base)
            self._state = (bases, [by_base[base] for base in bases])

    def replace(self, segments: Iterable[LogSegment], removed: Iterable[int]) -> None:
        """Add ``segments`` (each replacing a segment with its base offset) and remove the segments at the base
        offsets ``removed``, publishing ONE new list: a cleaning's swap, which a reader sees wholly before or wholly
        after. (Added then removed one at a time, the new segment stood beside an old one it replaces: a read found
        the next segment starting inside the segment it read, and took it for damage.)"""
        with self._lock:
            by_base = dict(zip(*self._state, strict=True))
            for base in removed:
                by_base.pop(base, None)
            for segment in segments:
                by_base[segment.base_offset] = segment
            bases = sorted(by_base)
            self._state = (bases, [by_base[base] for base in bases])

    def remove(self, base_offset: int) -> LogSegment | None:
        with self._lock:
            bases, segs = self._state
            i = bisect.bisect_left(bases, base_offset)
            if i < len(bases) and bases[i] == base_offset:
                seg = segs[i]
                self._state = (bases[:i] + bases[i + 1 :], segs[:i] + segs[i + 1 :])
                return seg
            return None

    def clear(self) -> None:
        with self._lock:
            self._state = ([], [])

    def close(self) -> None:
        for seg in self._state[1]:
            seg.close()

    def get(self, base_offset: int) -> LogSegment | None:
        bases, segs = self._state
        i = bisect.bisect_left(bases, base_offset)
        return segs[i] if i < len(bases) and bases[i] == base_offset else None

    def is_empty(self) -> bool:
        return not self._state[1]

    def number_of_segments(self) -> int:
        return len(self._state[1])

    def __len__(self) -> int:
        return len(self._state[1])

    def base_offsets(self) -> list[int]:
        return list(self._state[0])

    def values(self, from_offset: int | None = None, to_offset: int | None = None) -> list[LogSegment]:
        """Segments from the floor segment of ``from_offset`` to those with base offset < ``to_offset``."""
        bases, segs = self._state
        if from_offset is not None and to_offset is not None:
            if from_offset == to_offset:
                return []
            if to_offset < from_offset:
                raise ValueError(f"invalid segment range: from {from_offset} is after to {to_offset}")
        lo = 0
        if from_offset is not None:
            lo = max(0, bisect.bisect_right(bases, from_offset) - 1)
        hi = len(bases) if to_offset is None else bisect.bisect_left(bases, to_offset)
        return segs[lo:hi]

    def non_active_segments(self) -> list[LogSegment]:
        return self._state[1][:-1]

    @property
    def active_segment(self) -> LogSegment | None:
        segs = self._state[1]
        return segs[-1] if segs else None

    @property
    def first_segment(self) -> LogSegment | None:
        segs = self._state[1]
        return segs[0] if segs else None

    @property
    def last_segment(self) -> LogSegment | None:
        return self.active_segment

    def floor_segment(self, offset: int) -> LogSegment | None:
        bases, segs = self._state
        i = bisect.bisect_right(bases, offset) - 1
        return segs[i] if i >= 0 else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        bases, segs = self._state
        i = bisect.bisect_right(bases, offset)
        return segs[i] if i < len(segs) else None

    def lower_segment(self, offset: int) -> LogSegment | None:
        bases, segs = self._state
        i = bisect.bisect_left(bases, offset) - 1
        return segs[i] if i >= 0 else None

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._state[1])

    def __iter__(self) -> Iterable[LogSegment]:
        return iter(self._state[1])
