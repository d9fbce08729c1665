"""Where the columnar copies live (remote.log.columnar.dir): what cannot work is refused where it is set, and
named where it is found (tiered.columnar.location, local.config, verify)."""

from __future__ import annotations

from pathlib import Path

import pytest

from local import LogConfig
from local.errors import ConfigError
from tests.logutil import local_tier_props
from tiered.columnar.location import check_topic, columnar_root
from tiered.columnar.manifest import ColumnarManifestError, read_manifest

COLUMNAR = {"remote.storage.enable": "true", "remote.log.columnar.enable": "true"}


def _config(tmp_path: Path, where: str) -> LogConfig:
    return LogConfig.from_properties({**local_tier_props(tmp_path), "remote.log.columnar.dir": where})


@pytest.mark.parametrize(("where", "why"), [
    ("s3a://bucket/x", "a local path or file:// URI"),
    ("file://s3://bucket/x", "a local path or file:// URI"),
    ("hdfs://nn/x", "a local path or file:// URI"),
    ("relative_col", "an absolute path"),
    ("file://relative", "an absolute path"),
])
def test_a_place_spark_cannot_read_as_the_writer_does_is_refused_at_load(tmp_path: Path, where: str, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"Invalid value {where} for configuration remote\.log\.columnar\.dir: {why}"):
        _config(tmp_path, where)


@pytest.mark.parametrize("form", ["{}", "file://{}", " {} "])
def test_an_absolute_path_or_file_uri_is_taken(tmp_path: Path, form: str) -> None:
    config = _config(tmp_path, form.format(tmp_path / "col"))
    assert columnar_root(config) == tmp_path / "col"
    check_topic(config, config.topic_config(COLUMNAR))


@pytest.mark.parametrize("under", [False, True])
def test_a_file_where_the_directory_should_be_is_refused_when_a_topic_turns_the_copy_on(tmp_path: Path,
                                                                                       under: bool) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    config = _config(tmp_path, str(afile / "sub" if under else afile))
    with pytest.raises(ConfigError, match=r"remote\.log\.columnar\.enable.*remote\.log\.columnar\.dir.*"
                                          + ("a parent of" if under else "is not a directory")):
        check_topic(config, config.topic_config(COLUMNAR))
    with pytest.raises(ColumnarManifestError, match=r"_manifest\.json: cannot be read .*remote\.log\.columnar\.dir"):
        read_manifest((afile / "sub" if under else afile) / "t-0")


def test_verify_names_a_place_that_cannot_hold_the_copies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from local import LogManager
    from tiered.cli import main

    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    props = {**local_tier_props(tmp_path), "remote.log.columnar.dir": str(tmp_path / "col")}
    with LogManager(LogConfig.from_properties(props), start_scheduler=False) as m:
        m.get_or_create_log("t", 0, COLUMNAR)  # made while the place was fine
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**props, "remote.log.columnar.dir": str(afile)}.items()))
    assert main(["verify", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert f"{afile}" in out and "the columnar copies cannot be kept there" in out
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    assert main(["verify", "--config", str(config)]) == 0  # a place not made yet is no problem
