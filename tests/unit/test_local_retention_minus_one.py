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
