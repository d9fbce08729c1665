"""Batch encode and decode, records/s, against kafka-python's pure-Python builder and parser on the same records.

Target (issue 2): ours faster than kafka-python on both.
"""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from bench._util import best_of, report
from local.records import MemoryRecords, RecordBatch, SimpleRecord

BATCHES = 200


def _kp_build(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i, key=b"key-%d" % i, value=b"v" * size, headers=[])
    return bytes(b.build())


def main() -> None:
    for n, size in ((100, 100), (100, 1024)):
        simple = [SimpleRecord(1_700_000_000_000 + i, b"key-%d" % i, b"v" * size) for i in range(n)]
        total = n * BATCHES

        ours = best_of(lambda: [MemoryRecords.build(simple) for _ in range(BATCHES)], 3)  # noqa: B023
        theirs = best_of(lambda: [_kp_build(n, size) for _ in range(BATCHES)], 3)  # noqa: B023
        report(f"encode {n}x{size}B records", total / ours, total / theirs, "records/s", "kafka-python")

        data = bytes(MemoryRecords.build(simple))

        def decode_ours(data: bytes = data) -> None:
            for _ in range(BATCHES):
                for _r in RecordBatch(data).records():
                    pass

        def decode_theirs(data: bytes = data) -> None:
            for _ in range(BATCHES):
                for _r in DefaultRecordBatch(bytearray(data)):
                    pass

        ours = best_of(decode_ours, 3)
        theirs = best_of(decode_theirs, 3)
        report(f"decode {n}x{size}B records", total / ours, total / theirs, "records/s", "kafka-python")


if __name__ == "__main__":
    main()
