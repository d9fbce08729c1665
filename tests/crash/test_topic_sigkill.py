"""A topic's creation and deletion killed for real part way (SIGKILL of a child process, ``topic_child.py``): a
helper's kill -9 during CreateTopics left 6 of 8 (9 of 50, 60 of 400) partitions for good, and a retried create
answered TOPIC_ALREADY_EXISTS; one during DeleteTopics brought 139 of 300 partitions back. Kafka's controller writes
a topic, or its removal, in one atomic metadata batch. Now (local.topic_intents) the next start rolls an
interrupted creation back (the topic does not exist; creating it again makes it whole) and finishes an interrupted
deletion; a partition dir half removed is never loaded as a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.crash.stopping import kill_at
from tests.crash.topic_child import PARTITIONS, props

pytestmark = pytest.mark.crash

CHILD = Path(__file__).with_name("topic_child.py")


def _kill_at(data_dirs: str, op: str, step: str) -> None:
    kill_at(CHILD, [data_dirs, op, step], step)


def _dirs(tmp_path: Path) -> tuple[str, list[Path]]:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    return ",".join(map(str, dirs)), dirs


def _on_disk(dirs: list[Path]) -> list[str]:
    return sorted(p.name for d in dirs for p in d.iterdir() if not p.name.startswith((".", "tiered-load", "meta")))


def test_a_creation_committed_in_one_data_dir_when_killed_is_whole_after_the_start(tmp_path: Path) -> None:
    """Killed between the removal of the primary data dir's intent (the commit) and the other's: each dir settled
    its own intent, and the other rolled its half of the topic back (a review found 3 of 6 partitions left)."""
    data, dirs = _dirs(tmp_path)
    _kill_at(data, "create", "commit")
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert len([k for k in manager.partitions() if k[0] == "t"]) == PARTITIONS
        assert not [n for n in _on_disk(dirs) if n.startswith("tiered-topic-intent")]


@pytest.mark.parametrize("op", ["create", "delete"])
def test_an_operation_killed_while_its_intents_are_written_leaves_the_topic_whole_or_gone(
    tmp_path: Path, op: str
) -> None:
    """Killed with the intent written into one data dir only: a deletion was finished in that dir alone, and the
    other kept its partitions (3 of 6 after the restart, a review found)."""
    data, dirs = _dirs(tmp_path)
    if op == "delete":
        with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
            manager.create_partitions("t", range(PARTITIONS))
    _kill_at(data, op, "intent")
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert [k for k in manager.partitions() if k[0] == "t"] == []
        assert not [n for n in _on_disk(dirs) if n.startswith(("t-", "tiered-topic-intent"))], _on_disk(dirs)


def test_a_creation_killed_part_way_is_rolled_back_and_made_whole_when_asked_again(tmp_path: Path) -> None:
    data, dirs = _dirs(tmp_path)
    _kill_at(data, "create", "made")
    assert len([n for n in _on_disk(dirs) if n.startswith("t-")]) == 3  # what the crash left
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert [k for k in manager.partitions() if k[0] == "t"] == []  # the topic does not exist
        assert not [n for n in _on_disk(dirs) if n.startswith(("t-", "tiered-topic-intent"))], _on_disk(dirs)
        manager.create_partitions("t", range(PARTITIONS))
        logs = [manager.get_log("t", p) for p in range(PARTITIONS)]
        assert all(log is not None for log in logs) and len({log.topic_id for log in logs if log}) == 1
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert len([k for k in manager.partitions() if k[0] == "t"]) == PARTITIONS


@pytest.mark.parametrize("step", ["made", "rmtree"])
def test_a_deletion_killed_part_way_is_finished_at_the_next_start(tmp_path: Path, step: str) -> None:
    data, dirs = _dirs(tmp_path)
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        manager.create_partitions("t", range(PARTITIONS))
        manager.create_partitions("other", range(2))
        for p in range(PARTITIONS):
            log = manager.get_log("t", p)
            assert log is not None
            log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i) for i in range(100)]))
    _kill_at(data, "delete", step)
    left = [n for n in _on_disk(dirs) if n.startswith("t-")]
    assert left, "the crash left part of the topic"
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert [k for k in manager.partitions() if k[0] == "t"] == []
        assert sorted(k for k in manager.partitions() if k[0] == "other") == [("other", 0), ("other", 1)]
        assert not [n for n in _on_disk(dirs) if n.startswith(("t-", "tiered-topic-intent"))], _on_disk(dirs)
        assert manager.offline_partitions == {}


def test_an_intent_whose_write_was_cut_is_removed_at_the_start(tmp_path: Path) -> None:
    """A kill while the first intent was written left its temp file in the data dir for good (a helper's finding):
    nothing was made after it, and the start removes it."""
    data, dirs = _dirs(tmp_path)
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False):
        pass
    cut = dirs[0] / "tiered-topic-intent-0123456789abcdef0123456789abcdef.json.tmp"
    cut.write_bytes(b'{"version": 0, "op": "cre')
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
        assert manager.partitions() == [] and not cut.exists()


@pytest.mark.parametrize(("op", "step", "seen"), [("create", "made", 0), ("delete", "made", 0),
                                                  ("create", "commit", PARTITIONS)])
def test_a_read_only_view_sees_a_topic_as_the_next_start_will(tmp_path: Path, op: str, step: str, seen: int) -> None:
    """status, consume and topics describe read a data dir without settling its intents: they listed the half of
    a topic a creation had made (or a deletion had left) as a topic. They now leave out what the next start
    removes, and change nothing on disk."""
    data, dirs = _dirs(tmp_path)
    if op == "delete":
        with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:
            manager.create_partitions("t", range(PARTITIONS))
    _kill_at(data, op, step)
    before = _on_disk(dirs)
    assert [n for n in before if n.startswith("t-")] and [n for n in before if n.startswith("tiered-topic-intent")]
    with LogManager(LogConfig.from_properties(props(data)), read_only=True) as reader:
        assert len([k for k in reader.partitions() if k[0] == "t"]) == seen
    assert _on_disk(dirs) == before
    with LogManager(LogConfig.from_properties(props(data)), start_scheduler=False) as manager:  # the start agrees
        assert len([k for k in manager.partitions() if k[0] == "t"]) == seen
