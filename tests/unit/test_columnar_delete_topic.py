"""DeleteTopics of a topic that kept a columnar copy: the copy goes with the topic. It stayed in
``remote.log.columnar.dir``, published, so ``spark.read.parquet(<dir>/<topic>-<partition>)`` returned the deleted
topic's rows for good (unless a topic of the same name came again)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.columnar.manifest import read_manifest, write_manifest
from tiered.composition import remote_log_manager_of
from tiered.kafka.broker import KafkaBroker
from tiered.remote_tier_parts import topic_id_partition

TOPIC = "t"
ON = {"remote.storage.enable": "true", "remote.log.columnar.enable": "true"}


@contextmanager
def _copy_kept_then_given_up(tmp_path: Path) -> Iterator[tuple[LogManager, Any, KafkaBroker, Path]]:
    """A partition whose columnar copy was kept, then whose remote data was given up as Kafka does it (KIP-950:
    remote.storage.enable=false with remote.log.delete.on.disable=true, the copy turned off with it): the topic
    may be deleted now. Yields the manager, its remote log manager, a broker over it and the copy's directory."""
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_or_create_log(TOPIC, 0, ON)
        log.append(MemoryRecords.build([SimpleRecord(b"v%d" % i) for i in range(100)]))
        log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        rlm.run_once(manager.all_logs())
        copy = Path(f"{tmp_path / 'remote'}-columnar") / f"{TOPIC}-0"
        assert (copy / "_manifest.json").exists() and list(copy.glob("*.parquet"))  # the copy was kept
        broker = KafkaBroker(manager, config, "127.0.0.1", 9092)
        broker.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        rlm.run_once(manager.all_logs())
        assert not manager.get_log(TOPIC, 0).has_remote_data
        yield manager, rlm, broker, copy


def test_deleting_a_topic_removes_its_columnar_copy(tmp_path: Path) -> None:
    with _copy_kept_then_given_up(tmp_path) as (_manager, _rlm, broker, copy):
        broker.delete_topic(TOPIC)
        assert not copy.exists(), sorted(p.name for p in copy.rglob("*"))


def test_a_copy_of_another_topic_id_is_left_alone(tmp_path: Path) -> None:
    """A directory whose manifest names another topic id (a topic of the same name made again elsewhere) stays."""
    with _copy_kept_then_given_up(tmp_path) as (_manager, _rlm, broker, copy):
        manifest = copy / "_manifest.json"
        kept = manifest.read_bytes()
        found = read_manifest(copy)
        assert found is not None
        write_manifest(copy, replace(found, topic_id="AAAAAAAAAAAAAAAAAAAAAA"))
        broker.delete_topic(TOPIC)
        assert manifest.exists() and manifest.read_bytes() != kept


def test_a_data_dir_that_does_not_own_the_partition_leaves_the_copy(tmp_path: Path) -> None:
    """The directory may be shared by several data dirs (one bucket): the copy is the owner's. A deleted partition
    whose newest claim is another data dir's (one that attached it, or took it over) leaves the copy be."""
    with _copy_kept_then_given_up(tmp_path) as (manager, rlm, _broker, copy):
        log = manager.get_log(TOPIC, 0)
        tip = topic_id_partition(log)
        rlm.forget_deleted_partition(tip, log.name, "another-data-dir")
        assert (copy / "_manifest.json").exists()
        rlm.forget_deleted_partition(tip, log.name, log.remote_log_state.owner_id)
        assert not copy.exists()
