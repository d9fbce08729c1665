"""local.crc (fastcrc's CRC-32C, which every checksum of the project goes through, the C extensions' included)
against the crc32c package: the same values for any bytes, any split of them (continuing from a value), and any
bytes-like object the project hands it."""

from __future__ import annotations

import mmap

import crc32c as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from local.crc import crc32c


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=70_000), cut=st.integers(min_value=0, max_value=70_000))
def test_the_crc_matches_the_crc32c_package_whole_and_continued(data: bytes, cut: int) -> None:
    cut = min(cut, len(data))
    assert crc32c(data) == oracle.crc32c(data)
    assert crc32c(data[cut:], crc32c(data[:cut])) == oracle.crc32c(data)


def test_known_value_and_every_buffer_kind() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value
    data = bytes(range(256)) * 1000
    want = oracle.crc32c(data)
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        assert crc32c(mapped) == want and crc32c(memoryview(mapped)[17:]) == oracle.crc32c(data[17:])
    assert crc32c(bytearray(data)) == want and crc32c(memoryview(data)) == want


def test_the_c_extensions_use_it() -> None:
    """The batch checks in C (the append's walk, the Spark decoder) reject a batch whose CRC field is off by one bit
    and accept it with the CRC this module computes."""
    from local.records import MemoryRecords, SimpleRecord
    from local.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET
    from tiered.spark.arrow_records import ArrowBatchBuilder

    buf = bytearray(MemoryRecords.build([SimpleRecord(1, b"k", b"v" * 100)]).buffer)
    assert int.from_bytes(buf[CRC_OFFSET:CRC_OFFSET + 4], "big") == crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
    builder = ArrowBatchBuilder("t", 0)
    if builder.native:
        taken, _ = builder.add_run(bytes(buf), 0)
        assert taken == len(buf)
        buf[CRC_OFFSET + 3] ^= 1
        assert ArrowBatchBuilder("t", 0).add_run(bytes(buf), 0)[0] == 0
