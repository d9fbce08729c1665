"""``tiered export --incremental``'s commit through a staging directory and a pending state
(tiered.commands.export), at the level of its files: what a next run removes, finishes or refuses. The Spark runs,
and runs stopped at each step, are in tests/spark/test_spark_write.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tiered.commands import export
from tiered.commands._common import UsageError


def _args(out: Path) -> argparse.Namespace:
    return argparse.Namespace(out=str(out), format="parquet", topic="ev")


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_run_removes_only_its_own_stopped_staging_directories(tmp_path: Path) -> None:
    """The cleanup matched every name starting with '.<OUT>.export-' (a reviewer's pass): the old OUT a killed
    --overwrite left aside ('<staging>.old', the only copy of that export) and another output's staging directory
    ('<OUT>.export-2024'), whose pending run then moved no rows while its state moved on."""
    ev, other = _args(tmp_path / "ev"), _args(tmp_path / "ev.export-2024")
    export._write_state(ev, {"ev": {"0": 100}})
    stopped = _file(tmp_path / ".ev.export-0123456789ab" / "partition=0" / "part-1.parquet", "a stopped run's")
    old = _file(tmp_path / ".ev.export-0123456789ab.old" / "partition=0" / "part-0.parquet", "a previous export")
    staged = _file(tmp_path / ".ev.export-2024.export-aaaaaaaaaaaa" / "partition=0" / "part-2.parquet", "rows 0..499")
    export._write_state(other, {"ev": {"0": 0}}, pending={"staged": staged.parents[1].name,
                                                          "next_offsets": {"ev": {"0": 500}}})
    assert export._settled_state(ev) == {"topic": "ev", "format": "parquet", "next_offsets": {"ev": {"0": 100}}}
    assert not stopped.exists() and old.read_text() == "a previous export" and staged.exists()
    assert export._settled_state(other)["next_offsets"] == {"ev": {"0": 500}}  # type: ignore[index]
    assert (tmp_path / "ev.export-2024" / "partition=0" / "part-2.parquet").read_text() == "rows 0..499"
    assert not staged.parents[1].exists()


def test_a_pending_run_whose_staging_directory_is_gone_is_refused_not_taken_for_done(tmp_path: Path) -> None:
    """Its next offsets were taken as exported though its rows never reached OUT (a reviewer's pass)."""
    ev = _args(tmp_path / "ev")
    export._write_state(ev, {"ev": {"0": 0}}, pending={"staged": ".ev.export-bbbbbbbbbbbb",
                                                       "next_offsets": {"ev": {"0": 500}}})
    with pytest.raises(UsageError, match=r"records a run whose files were being moved into .* which is gone"):
        export._settled_state(ev)
    assert json.loads(Path(export.state_path(ev.out)).read_text())["next_offsets"] == {"ev": {"0": 0}}


def test_rows_are_counted_from_the_exports_own_files(tmp_path: Path) -> None:
    """A file of another kind put in OUT made the count after a committed run raise (a reviewer's pass)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    (out / "partition=0").mkdir(parents=True)
    pq.write_table(pa.table({"offset": [1, 2, 3]}), out / "partition=0" / "part-0.parquet")
    _file(out / "partition=0" / "notes.txt", "mine")
    assert export._count_rows(str(out), "parquet") == 3


def test_a_symlinked_out_is_staged_beside_its_target(tmp_path: Path) -> None:
    """OUT a symlink to another file system: the staging directory went beside the link, and every move into OUT
    failed with EXDEV, the run left pending for good (a helper's pass). It is staged beside the target now."""
    target = tmp_path / "elsewhere" / "export"
    target.mkdir(parents=True)
    (tmp_path / "here").mkdir()
    link = tmp_path / "here" / "out"
    link.symlink_to(target)
    staged = Path(export._staging_path(str(link)) or "")
    assert staged.parent == target.parent and export._staging_name(str(link)).fullmatch(staged.name)
    _file(staged / "partition=0" / "part-0.parquet", "rows")
    export._move_into(str(staged), str(link))
    assert (target / "partition=0" / "part-0.parquet").read_text() == "rows" and link.is_symlink()


def test_a_java_error_is_said_by_its_root_cause() -> None:
    """A full disk said only 'An error occurred while calling o68.parquet.' (a helper's pass): Py4J's first line."""
    from tiered.commands._spark import spark_error_summary

    text = ("An error occurred while calling o68.parquet.\n"
            ": org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/x.\n"
            "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError(x.scala:1)\n"
            "Caused by: org.apache.spark.SparkException: Job aborted.\n"
            "Caused by: java.io.IOException: No space left on device\n"
            "\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)\n")
    assert spark_error_summary(Exception(text)) == "IOException: No space left on device"
    assert spark_error_summary(Exception("An error occurred while calling o1.x.\n: java.lang.IllegalStateException: "
                                         "bad state\n\tat a.b(c)")) == "IllegalStateException: bad state"
