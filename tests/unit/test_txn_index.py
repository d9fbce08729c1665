"""TransactionIndex and AbortedTxn: Kafka's TransactionIndexTest cases and the FORMATS.md example."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from local.errors import CorruptIndexError, InvalidOffsetError
from local.index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex, TxnIndexSearchResult

TXNS = [
    AbortedTxn(producer_id=0, first_offset=0, last_offset=10, last_stable_offset=11),
    AbortedTxn(producer_id=1, first_offset=5, last_offset=15, last_stable_offset=13),
    AbortedTxn(producer_id=2, first_offset=18, last_offset=35, last_stable_offset=25),
    AbortedTxn(producer_id=3, first_offset=32, last_offset=50, last_stable_offset=40),
]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.txnindex"


@pytest.fixture
def index(path: Path) -> TransactionIndex:
    path.touch()  # Kafka's test starts from an existing empty file
    return TransactionIndex(0, path)


def append_all(index: TransactionIndex, txns: list[AbortedTxn]) -> None:
    for txn in txns:
        index.append(txn)


# --- AbortedTxn codec --------------------------------------------------------------------------------


def test_aborted_txn_serde() -> None:
    txn = AbortedTxn(983493, 137, 299, 200)
    assert txn.version == 0
    encoded = txn.encode()
    assert len(encoded) == ABORTED_TXN_SIZE == 34
    assert encoded == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    assert AbortedTxn.decode(encoded) == txn
    assert AbortedTxn.decode(b"\x00" * 5 + encoded, 5) == txn


def test_aborted_txn_newer_version_is_corrupt() -> None:
    with pytest.raises(CorruptIndexError, match="version 1"):
        AbortedTxn.decode(struct.pack(">hqqqq", 1, 1, 2, 3, 4))


# --- Kafka TransactionIndexTest ----------------------------------------------------------------------


def test_position_set_correctly_when_opened(path: Path, index: TransactionIndex) -> None:
    append_all(index, TXNS)
    index.close()
    reopened = TransactionIndex(0, path)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == [*TXNS, another]


def test_reopened_index_still_requires_increasing_last_offset(path: Path, index: TransactionIndex) -> None:
    append_all(index, TXNS)
    index.close()
    reopened = TransactionIndex(0, path)
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(9, 40, 50, 45))


def test_sanity_check(path: Path, index: TransactionIndex) -> None:
    append_all(index, TXNS)
    index.sanity_check()
    index.close()
    with TransactionIndex(100, path) as reopened, pytest.raises(CorruptIndexError) as info:
        reopened.sanity_check()  # a different start offset fakes invalid data
    assert info.value.context["start_offset"] == 100 and info.value.context["path"] == path


def test_sanity_check_partial_trailing_entry(path: Path, index: TransactionIndex) -> None:
    append_all(index, TXNS[:2])
    index.close()
    with open(path, "ab") as file:
        file.write(TXNS[2].encode()[:20])  # a crash in the middle of an append
    reopened = TransactionIndex(0, path)
    assert reopened.all_aborted_txns() == TXNS[:2], "reads ignore the partial entry"
    with pytest.raises(CorruptIndexError, match="not a multiple of 34"):
        reopened.sanity_check()


def test_unknown_version_in_file_is_corrupt(path: Path) -> None:
    path.write_bytes(TXNS[0].encode() + struct.pack(">hqqqq", 7, 1, 20, 30, 40))
    index = TransactionIndex(0, path)
    with pytest.raises(CorruptIndexError) as info:
        index.all_aborted_txns()
    assert info.value.context["path"] == path and info.value.context["position"] == 34


def test_last_offset_must_increase(index: TransactionIndex) -> None:
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError) as info:
        index.append(AbortedTxn(0, 0, 15, 11))
    assert info.value.context["offset"] == 15 and info.value.context["last_offset"] == 15


def test_last_offset_cannot_decrease(index: TransactionIndex) -> None:
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, 10, 11))
    assert index.all_aborted_txns() == [AbortedTxn(1, 5, 15, 13)]


def test_collect_aborted_transactions(index: TransactionIndex) -> None:
    append_all(index, TXNS)
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult(TXNS, False)
    assert index.collect_aborted_txns(0, 32) == TxnIndexSearchResult(TXNS[:3], True)
    assert index.collect_aborted_txns(0, 35) == TxnIndexSearchResult(TXNS, True)
    assert index.collect_aborted_txns(10, 35) == TxnIndexSearchResult(TXNS, True)
    assert index.collect_aborted_txns(11, 35) == TxnIndexSearchResult(TXNS[1:], True)
    assert index.collect_aborted_txns(20, 41) == TxnIndexSearchResult(TXNS[2:], False)


def test_worked_example(index: TransactionIndex) -> None:
    """TXNS searched from several offsets: the result is complete once a transaction ends past the upper bound."""
    append_all(index, TXNS)
    result = index.collect_aborted_txns(0, 100)
    assert (result.aborted_txns, result.is_complete) == (TXNS, False)
    result = index.collect_aborted_txns(0, 32)
    assert (result.aborted_txns, result.is_complete) == (TXNS[:3], True)
    result = index.collect_aborted_txns(11, 35)
    assert (result.aborted_txns, result.is_complete) == (TXNS[1:], True)
    result = index.collect_aborted_txns(20, 41)
    assert (result.aborted_txns, result.is_complete) == (TXNS[2:], False)


def test_truncate(index: TransactionIndex) -> None:
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    append_all(index, txns)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_txns == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_txns == txns[:3]
    index.append(AbortedTxn(4, 36, 45, 40))  # last offset 35 is the one to beat now
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(5, 40, 44, 40))
    index.truncate_to(0)
    assert index.is_empty()
    index.append(AbortedTxn(6, 0, 1, 1))  # empty after truncation: any last offset goes
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_txns == []


def test_rename_index(tmp_path: Path, index: TransactionIndex) -> None:
    renamed = tmp_path / "renamed.txnindex"
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename_to(renamed)
    assert index.path == renamed and renamed.exists()
    index.append(AbortedTxn(1, 5, 15, 16))
    txns = index.collect_aborted_txns(0, 100).aborted_txns
    assert [txn.first_offset for txn in txns] == [0, 5]


def test_rename_before_the_file_exists(tmp_path: Path) -> None:
    index = TransactionIndex(0, tmp_path / "0.txnindex")
    index.rename_to(tmp_path / "0.txnindex.deleted")
    assert index.path == tmp_path / "0.txnindex.deleted"
    assert not index.path.exists()


def test_flush(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    with TransactionIndex(0, path) as index:
        index.flush()
        assert not path.exists()
        index.append(AbortedTxn(0, 0, 10, 2))
        index.flush()
        assert path.stat().st_size == 34


def test_delete_if_exists(path: Path, index: TransactionIndex) -> None:
    assert path.exists()
    assert index.delete_if_exists() is True
    assert not path.exists()
    assert index.delete_if_exists() is False


def test_is_empty_when_file_does_not_exist(tmp_path: Path) -> None:
    assert TransactionIndex(0, tmp_path / "0.txnindex").is_empty()


def test_is_empty_when_file_is_empty(index: TransactionIndex) -> None:
    assert index.is_empty()


def test_is_empty_when_file_is_not_empty(index: TransactionIndex) -> None:
    index.append(AbortedTxn(0, 0, 10, 2))
    assert not index.is_empty()


def test_do_not_create_file_until_needed(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(0, path)
    assert not path.exists()
    index.reset()
    index.flush()
    index.truncate_to(0)
    index.sanity_check()
    assert index.all_aborted_txns() == []
    assert index.collect_aborted_txns(0, 10) == TxnIndexSearchResult([], False)
    assert not path.exists()
    index.append(AbortedTxn(0, 0, 10, 2))
    assert path.exists()


def test_append_and_collect_after_close(index: TransactionIndex) -> None:
    index.close()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.close()
    index.append(AbortedTxn(1, 5, 15, 16))
    index.close()
    txns = index.collect_aborted_txns(0, 100).aborted_txns
    assert [txn.first_offset for txn in txns] == [0, 5]


def test_on_disk_bytes_are_kafkas(path: Path, index: TransactionIndex) -> None:
    append_all(index, TXNS[:2])
    index.close()
    assert path.read_bytes() == b"".join(struct.pack(">hqqqq", 0, t.producer_id, t.first_offset, t.last_offset,
                                                     t.last_stable_offset) for t in TXNS[:2])
