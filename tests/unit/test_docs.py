"""The generated reference docs (``python -m tiered.docsgen``): the committed files are what the generator writes
now, every key the code defines is in docs/configuration.md, every command (and subcommand) is in docs/cli.md,
and the generator refuses a key it has no description for, so the reference cannot fall behind the code."""

from __future__ import annotations

import argparse
import re
import sys
import types
from pathlib import Path

import pytest

from local.config import OTHER_BROKER_KEYS, key_definitions
from tiered import cli, docsgen

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", ["configuration.md", "cli.md"])
def test_the_committed_reference_is_what_the_generator_writes(name: str) -> None:
    generated = docsgen.generated()[DOCS / name]
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert committed == generated, f"docs/{name} is stale: run python -m tiered.docsgen"


def test_check_mode_names_a_stale_file_and_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(docsgen, "DOCS", tmp_path)
    assert docsgen.main(["--check"]) == 1  # nothing written yet
    assert f"{tmp_path / 'cli.md'} is stale" in capsys.readouterr().err
    assert docsgen.main([]) == 0 and docsgen.main(["--check"]) == 0
    (tmp_path / "configuration.md").write_text("old\n")
    assert docsgen.main(["--check"]) == 1
    assert "configuration.md is stale" in capsys.readouterr().err


def _table_keys(text: str) -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE))


def test_every_key_the_code_defines_is_in_the_configuration_reference() -> None:
    listed = _table_keys((DOCS / "configuration.md").read_text(encoding="utf-8"))
    defined = {d.key for d in key_definitions()} | set(OTHER_BROKER_KEYS)
    defined |= {f"rsm.config.{key}" for keys in docsgen.rsm_config_keys().values() for key in keys}
    assert defined - listed == set()
    assert {"segment.bytes", "remote.storage.enable", "tiered.http.listen", "rsm.config.bucket",
            "rsm.config.aws_secret_access_key", "rsm.config.dir"} <= listed


def test_the_reference_shows_each_keys_default_and_range_from_the_definitions() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert "| `segment.bytes` | `log.segment.bytes` | 1073741824 (1 GiB) | [1048576, 2^63-1] |" in text
    assert "| `local.retention.ms` | `log.local.retention.ms` | -2 | [-2, 2^63-1] |" in text
    assert "| `compression.type` | same key | `producer` | producer, uncompressed, gzip, snappy, lz4, zstd |" in text
    assert "| `remote.log.manager.task.interval.ms` | 30000 |" in text


def test_a_key_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    descriptions = dict(docsgen.DESCRIPTIONS)
    del descriptions["local.retention.bytes"]
    monkeypatch.setattr(docsgen, "DESCRIPTIONS", descriptions)
    with pytest.raises(SystemExit, match=r"local\.retention\.bytes has no description"):
        docsgen.configuration_md()


def test_a_description_of_a_key_the_code_does_not_define_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(docsgen.DESCRIPTIONS, "log.gone.ms", "a key removed from the code")
    with pytest.raises(SystemExit, match=r"log\.gone\.ms"):
        docsgen.configuration_md()


def test_a_backend_key_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiered.backends.s3 import S3Store

    monkeypatch.setattr(S3Store, "CONFIG_KEYS", (*S3Store.CONFIG_KEYS, "new_knob"))
    with pytest.raises(SystemExit, match=r"s3 backend: undescribed \['new_knob'\]"):
        docsgen.configuration_md()


def test_every_command_and_subcommand_has_its_help_in_the_cli_reference() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name in cli.COMMANDS:
        assert f"\n## tiered {name}\n" in text
        assert f"usage: tiered {name} " in text
    assert "--listen HOST:PORT" in text and "--stop-timeout SECONDS" in text


def test_a_new_command_and_its_subcommands_appear_without_a_change_to_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("tiered.commands.frobnicate")

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action")
        sub.add_parser("twiddle", help="twiddle it").add_argument("--knob", help="the knob to twiddle")

    module.add_arguments = add_arguments  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiered.commands.frobnicate", module)
    monkeypatch.setitem(cli.COMMANDS, "frobnicate", "frobnicate the log")
    text = docsgen.cli_md()
    assert "\n## tiered frobnicate\n" in text and "frobnicate the log" in text
    assert "\n## tiered frobnicate twiddle\n" in text and "--knob KNOB" in text
    assert "- [`tiered frobnicate twiddle`](#tiered-frobnicate-twiddle)" in text


def test_every_key_the_operations_guide_names_is_one_the_code_defines() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)(?:=[^`]*)?`", text))
    defined = {d.key for d in key_definitions()} | set(OTHER_BROKER_KEYS)
    defined |= {f"rsm.config.{key}" for keys in docsgen.rsm_config_keys().values() for key in keys}
    assert {"remote.storage.enable", "local.retention.ms", "retention.bytes", "tiered.http.listen"} <= named
    assert named - defined == set()


def test_the_readme_links_to_every_guide_and_each_link_resolves() -> None:
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert {"docs/configuration.md", "docs/cli.md", "docs/operations.md"} <= linked
    assert [path for path in linked if not (DOCS.parent / path).is_file()] == []


def test_every_tiered_command_line_in_the_guides_parses() -> None:
    """A command copied from README.md or docs/ is one the CLI takes (a wrong usage in docs/columnar.md went
    unnoticed until a user ran it). Lines of shell blocks that start with ``tiered``, continuations joined; pipes,
    redirections and variables left out."""
    import re
    import shlex

    from tiered.cli import parse_args

    checked, bad = 0, []
    for md in sorted([*DOCS.glob("*.md"), DOCS.parent / "README.md"]):
        for block in re.findall(r"```(?:sh|bash|shell|console)\n(.*?)```", md.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ").split(" #")[0].strip()
                if not line.startswith("tiered ") or any(c in line for c in "|&;<>`$("):
                    continue
                checked += 1
                try:
                    parse_args(shlex.split(line)[1:])
                except SystemExit as exc:
                    if exc.code != 0:
                        bad.append(f"{md.name}: {line}")
    assert checked >= 15 and not bad, bad
