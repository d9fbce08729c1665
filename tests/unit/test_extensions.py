"""A C extension built before its C source last changed is not used (local.extensions): an editable install after a
``git pull`` called the old build with the new arguments (a TypeError at the first log cleaning, a helper's pass)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local.extensions import fresh_extension


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "extpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("VALUE = 1\n")  # stands in for the built module (any file-backed module)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in ("extpkg.core", "extpkg"):
        sys.modules.pop(name, None)


def _mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t))


def test_a_build_newer_than_its_source_is_used(package: Path) -> None:
    (package / "core.c").write_text("/* source */")
    _mtime(package / "core.c", 1_000_000)
    _mtime(package / "core.py", 2_000_000)
    module = fresh_extension("extpkg.core")
    assert module is not None and module.VALUE == 1


def test_a_build_older_than_its_source_is_not_used_and_said_once(package: Path, caplog: pytest.LogCaptureFixture) -> None:
    (package / "core.c").write_text("/* source, changed since the build */")
    _mtime(package / "core.py", 1_000_000)
    _mtime(package / "core.c", 2_000_000)
    with caplog.at_level(logging.WARNING, logger="local.extensions"):
        assert fresh_extension("extpkg.core") is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "extpkg.core" in line and "core.c" in line and "pip install -e ." in line


def test_no_source_beside_it_or_no_build_at_all(package: Path) -> None:
    assert fresh_extension("extpkg.core") is not None  # a wheel: no source to compare
    assert fresh_extension("extpkg.not_built") is None
