"""LogSegment.append vs raw os.write of the same batch bytes; recover() vs reading the file and crc32c over it.

Targets (issue 2): append >= 0.5x raw os.write; recover() >= 0.25x read+crc32c.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bench._util import best_of, report
from local.crc import crc32c
from local.records import MemoryRecords, SimpleRecord
from local.records.batch import set_base_offset
from local.segment import LogSegment

TOTAL = 256 * 1024 * 1024


def main() -> None:
    base = bytes(MemoryRecords.build([SimpleRecord(1_700_000_000_000, None, b"r" * 1024) for _ in range(16)]))
    count = TOTAL // len(base)
    batches = []
    for i in range(count):
        buf = bytearray(base)
        set_base_offset(buf, 0, i * 16)
        batches.append(MemoryRecords(bytes(buf)))
    tmp = Path(tempfile.mkdtemp(prefix="bench-seg-"))
    try:
        def raw() -> None:
            fd = os.open(tmp / "raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for b in batches:
                os.write(fd, b.buffer)
            os.close(fd)

        def ours() -> None:
            for p in tmp.glob("0000*"):
                p.unlink()
            seg = LogSegment.open(tmp, 0, max_index_size=10 * 1024 * 1024)
            for i, b in enumerate(batches):
                seg.append(i * 16 + 15, b)
            seg.close()

        mb = count * len(base) / 1e6
        report("LogSegment.append 16 KiB batches", mb / best_of(ours, 3), mb / best_of(raw, 3), "MB/s", "raw os.write", 0.5)

        log_path = tmp / "00000000000000000000.log"

        def read_crc() -> None:
            with open(log_path, "rb", buffering=0) as f:
                crc = 0
                while chunk := f.read(1024 * 1024):
                    crc = crc32c(chunk, crc)

        def recover() -> None:
            seg = LogSegment.open(tmp, 0, max_index_size=10 * 1024 * 1024, file_already_exists=True)
            assert seg.recover() == 0
            seg.close()

        report("LogSegment.recover", mb / best_of(recover, 3), mb / best_of(read_crc, 3), "MB/s", "read + crc32c", 0.25)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
