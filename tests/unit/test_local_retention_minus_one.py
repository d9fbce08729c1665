"""local.retention.ms/bytes=-1 under a finite retention.ms/bytes on a tiered topic is refused, as Kafka's
LogConfig.validateRemoteStorageRetentionTime/Size refuse it ("Value must not be -1 as retention.ms value is set as")."""

from __future__ import annotations

from pathlib import Path

import pytest

from local import LogConfig
from local.errors import ConfigError


def _broker(tmp_path: Path, **extra: str) -> LogConfig:
    return LogConfig.from_properties({"log.dirs": str(tmp_path), "remote.log.storage.system.enable": "true", **extra})


@pytest.mark.parametrize("key,total", [("local.retention.ms", "retention.ms"),
                                       ("local.retention.bytes", "retention.bytes")])
def test_minus_one_local_under_finite_total_is_refused(tmp_path: Path, key: str, total: str) -> None:
    cfg = _broker(tmp_path)
    with pytest.raises(ConfigError, match=rf"{key}: Value must not be -1 as {total} value is set as 1000"):
        cfg.topic_config({"remote.storage.enable": "true", total: "1000", key: "-1"})


@pytest.mark.parametrize("key,total", [("local.retention.ms", "retention.ms"),
                                       ("local.retention.bytes", "retention.bytes")])
def test_minus_one_local_under_infinite_total_or_without_remote_is_accepted(tmp_path: Path, key: str, total: str) -> None:
    cfg = _broker(tmp_path)
    cfg.topic_config({"remote.storage.enable": "true", total: "-1", key: "-1"})
    LogConfig.from_properties({"log.dirs": str(tmp_path)}).topic_config({total: "1000", key: "-1"})


def test_a_persisted_config_a_changed_broker_default_made_invalid_still_loads(tmp_path: Path) -> None:
    """Created valid (total retention unlimited by the broker's default), then the broker's log.retention.ms set:
    the partition loads as it was written, describe shows it, and only a new change to it is checked (Kafka checks
    on create and alter only). Before, the start took it offline."""
    from local import LogManager
    from local.records import MemoryRecords, SimpleRecord
    from tiered.commands.topics import describe

    props = {"log.dirs": str(tmp_path / "data"), "remote.log.storage.system.enable": "true",
             "remote.log.storage.manager.class.name": "local", "rsm.config.dir": str(tmp_path / "remote")}
    with LogManager(LogConfig.from_properties({**props, "log.retention.ms": "-1"}), start_scheduler=False) as m:
        log = m.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.ms": "-1"})
        log.append(MemoryRecords.build([SimpleRecord(b"k", b"v")]))
    config = LogConfig.from_properties({**props, "log.retention.ms": "3600000"})
    with LogManager(config, start_scheduler=False) as m:
        assert not m.offline_partitions
        log = m.get_log("t", 0)
        assert log is not None and log.log_end_offset == 1 and log.config.local_retention_ms == -1
        shown = {c["name"]: c["value"] for c in describe(config, "t", {0: tmp_path / "data" / "t-0"})["configs"]}
        assert shown["local.retention.ms"] == "-1"
        with pytest.raises(ConfigError, match=r"Value must not be -1 as retention\.ms value is set as 3600000"):
            m.get_or_create_log("t", 0, {"remote.storage.enable": "true", "local.retention.ms": "-1"})
