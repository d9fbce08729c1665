"""The columnar copy needs pyarrow (the ``columnar`` extra), which a plain ``pip install tiered`` does not bring: asking
for it says so in one line, and ``verify`` says what it could not check instead of failing with an import error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.logutil import local_tier_props
from tiered.cli import main


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "broker.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in local_tier_props(tmp_path).items()))
    return path


def _no_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiered.columnar.location as location

    monkeypatch.setattr(location, "pyarrow_missing", lambda: True)


def test_asking_for_the_columnar_copy_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_pyarrow(monkeypatch)
    rc = main(["--config", str(_config(tmp_path)), "topics", "create", "-t", "e", "--topic-config",
               "remote.storage.enable=true", "--topic-config", "remote.log.columnar.enable=true"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().splitlines() == [
        "tiered topics: Invalid value true for configuration remote.log.columnar.enable: the columnar copy is written "
        "with pyarrow, which is not installed: pip install 'tiered[columnar]'"]
    assert not (tmp_path / "data" / "e-0").exists()


def test_verify_without_pyarrow_says_the_columnar_copies_are_not_checked_and_judges_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    assert main(["--config", str(config), "topics", "create", "-t", "e", "--topic-config",
                 "remote.storage.enable=true"]) == 0
    (tmp_path / "remote").mkdir()  # the bucket (made by a first copy)
    root = tmp_path / "remote-columnar"  # beside it: where the columnar copies would be
    root.mkdir()
    capsys.readouterr()
    _no_pyarrow(monkeypatch)
    rc = main(["--config", str(config), "verify", "--remote"])
    out, err = capsys.readouterr()
    assert rc == 0 and "verify OK" in out
    assert err.strip() == (f"tiered verify: the columnar copies in {root} are not checked: the columnar copy is written "
                           "with pyarrow, which is not installed: pip install 'tiered[columnar]'")
