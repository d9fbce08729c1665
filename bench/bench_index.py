"""Offset and time index lookups against ``bisect.bisect_right`` over an in-memory list of the same keys.

The index answers from its mmap'd file (through a key mirror), returning a new value object per lookup;
the baseline only finds a list slot. Target: lookups within 3x of the baseline, i.e. a ratio >= 0.33x.
Random lookups mostly take the cold path (the warm section is the last 8 KiB); "tail" lookups fall in it.
Also reported: time to open (map + build the mirror) and sanity-check an index of 1M entries.
"""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
from pathlib import Path

from bench._util import best_of, report, report_latency
from local.index import OffsetIndex, TimeIndex

ENTRIES = 100_000
LOOKUPS = 200_000
TARGET_RATIO = 1 / 3


def _build_offset_index(path: Path, entries: int, use_large_format: bool, rng: random.Random) -> list[int]:
    entry_size = 12 if use_large_format else 8
    offsets: list[int] = []
    with OffsetIndex(path, 0, entries * entry_size, use_large_format=use_large_format) as index:
        offset = position = 0
        for _ in range(entries):
            offset += rng.randint(1, 40)
            position += rng.randint(4096, 6000)
            index.append(offset, position)
            offsets.append(offset)
    return offsets


def _compare(
    name: str, lookup: object, keys: list[int], targets: list[int], target: float | None = TARGET_RATIO
) -> None:
    find = lookup
    bisect_right = bisect.bisect_right
    assert callable(find)

    def ours() -> None:
        for target in targets:
            find(target)

    def baseline() -> None:
        for target in targets:
            bisect_right(keys, target)

    ours_s = best_of(ours)
    base_s = best_of(baseline)
    report(name, len(targets) / ours_s, len(targets) / base_s, "lookups/s", "bisect_right", target=target)


def main() -> None:
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        directory = Path(tmp)
        for large in (False, True):
            label = "12-byte" if large else "8-byte"
            path = directory / f"{label}.index"
            offsets = _build_offset_index(path, ENTRIES, large, rng)
            index = OffsetIndex(path, 0, writable=False)
            random_targets = [rng.randint(0, offsets[-1] + 10) for _ in range(LOOKUPS)]
            tail_targets = [rng.randint(offsets[-500], offsets[-1]) for _ in range(LOOKUPS)]
            _compare(f"offset index {label}, {ENTRIES:,} entries, random lookup", index.lookup, offsets, random_targets)
            # Informational: near the end bisect itself is cheap, so the fixed cost of a lookup weighs more.
            _compare(f"offset index {label}, {ENTRIES:,} entries, tail lookup", index.lookup, offsets, tail_targets,
                     target=None)
            index.close()

        time_path = directory / "0.timeindex"
        timestamps: list[int] = []
        with TimeIndex(time_path, 0, ENTRIES * 12 + 12) as time_index:
            timestamp = 1_700_000_000_000
            for n in range(ENTRIES):
                timestamp += rng.randint(1, 1000)
                time_index.maybe_append(timestamp, n * 10)
                timestamps.append(timestamp)
        time_index = TimeIndex(time_path, 0, writable=False)
        ts_targets = [rng.randint(timestamps[0] - 10, timestamps[-1]) for _ in range(LOOKUPS)]
        _compare(f"time index, {ENTRIES:,} entries, random lookup", time_index.lookup, timestamps, ts_targets)
        time_index.close()

        # Opening builds the key mirror with numpy; compare with reading the same keys into a list.
        big = directory / "big.index"
        big_offsets = _build_offset_index(big, 1_000_000, True, rng)

        def open_and_check() -> None:
            with OffsetIndex(big, 0, writable=False) as opened:
                opened.sanity_check()

        def parse_per_entry() -> None:
            data = big.read_bytes()
            relatives = [relative for relative, _ in struct.iter_unpack(">iq", data)]
            assert len(relatives) == len(big_offsets)

        report_latency("open + sanity_check, 1M-entry offset index", best_of(open_and_check),
                       best_of(parse_per_entry), "read + struct.iter_unpack per entry", target=1.0)


if __name__ == "__main__":
    main()
