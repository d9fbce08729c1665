"""A partition's columnar dir holding another partition's copy (a restore into the wrong directory): the topic id is
the same, so readers took it, and read_topic and the stream returned partition 1's rows as partition 0's offsets
(partition 0's offsets missing, partition 1's twice), silently. The manifest names its partition: it is checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord
from tests.logutil import local_tier_props
from tiered.columnar.manifest import ColumnarManifestError
from tiered.composition import remote_log_manager_of

TOPIC = "t"


def _two_copies(tmp_path: Path) -> tuple[Path, Path]:
    props = local_tier_props(tmp_path, **{"remote.log.manager.copier.process.enable": "false"})
    config = LogConfig.from_properties(props)
    with LogManager(config, start_scheduler=False) as manager:
        for p in (0, 1):
            log = manager.get_or_create_log(TOPIC, p, {"remote.storage.enable": "true",
                                                       "remote.log.columnar.enable": "true"})
            log.append(MemoryRecords.build([SimpleRecord(b"p%d-%d" % (p, i)) for i in range(100)]))
            log.roll()
        rlm = remote_log_manager_of(manager)
        assert rlm is not None
        rlm.run_once(manager.all_logs())
    conf = tmp_path / "broker.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    root = Path(f"{tmp_path / 'remote'}-columnar")
    shutil.rmtree(root / f"{TOPIC}-0")
    shutil.copytree(root / f"{TOPIC}-1", root / f"{TOPIC}-0")  # partition 1's copy where partition 0's was
    return conf, root


def test_a_plan_refuses_the_copy_of_another_partition(tmp_path: Path) -> None:
    from tiered.spark.columnar_read import plan_topic

    conf, _root = _two_copies(tmp_path)
    with pytest.raises(ColumnarManifestError, match=r"copy of t-1, not of t-0"):
        plan_topic({"config": str(conf), "topics": TOPIC})
    plan = plan_topic({"config": str(conf), "topics": TOPIC, "columnarCopy": "false"})
    assert plan.source_ranges == [(TOPIC, 0, 0, 100), (TOPIC, 1, 0, 100)]


def test_the_keeper_does_not_extend_the_copy_of_another_partition(tmp_path: Path) -> None:
    _conf, root = _two_copies(tmp_path)
    before = (root / f"{TOPIC}-0" / "_manifest.json").read_bytes()
    config = LogConfig.from_properties(local_tier_props(tmp_path, **{
        "remote.log.manager.copier.process.enable": "false"}))
    with LogManager(config, start_scheduler=False) as manager:
        log = manager.get_log(TOPIC, 0)
        log.append(MemoryRecords.build([SimpleRecord(b"more%d" % i) for i in range(100)]))
        log.roll()
        rlm = remote_log_manager_of(manager)
        rlm.run_once(manager.all_logs())
    assert (root / f"{TOPIC}-0" / "_manifest.json").read_bytes() == before  # partition 0's rows not added to it
