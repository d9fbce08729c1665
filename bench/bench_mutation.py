"""Mutation testing of the engine's critical modules with mutmut: ``python -m bench mutation [MODULE...]``.

Not a benchmark and not part of ``python -m bench`` (nor of CI): a full run takes hours on a small machine.
Run it by hand after changing a critical module or its tests, and record the score and the surviving mutants
in TESTING.md.

Each module is mutated on its own, in a scratch copy of the repository (``local/``, ``tiered/``, ``tests/``,
``pyproject.toml``), against the tests that cover it (``MODULES`` below): mutmut 3 reads its settings from the
``[tool.mutmut]`` table of ``pyproject.toml``, and the copy gets that table with ``only_mutate`` and the test
selection narrowed to the one module. The worktree itself is never touched (no ``mutants/`` directory in it).

    python -m bench mutation                          # every module of MODULES (hours)
    python -m bench mutation local/records/varint.py  # one module, against its tests
    python -m bench mutation --jobs 2 --keep local/epoch.py tiered/rsm.py
    python -m bench mutation local/log.py --only '*retention*' '*truncate*'   # some functions of a big module

``--jobs`` is mutmut's ``--max-children`` (default 1: the machine is shared); ``--keep`` leaves the scratch
copy so that ``mutmut show NAME`` / ``mutmut browse`` can be run in it. Each module's line reports killed /
tested mutants and lists the survivors with their diffs.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Critical module -> the tests that are meant to catch a change in it (the unit and property tests that
# exercise it directly; a narrow selection keeps a run within minutes per module).
RT = "tests/unit/test_remote_tier.py::"
RLM = "tests/unit/test_rlm_tasks.py::"
MODULES: dict[str, list[str]] = {
    # record validation and CRC
    "local/records/varint.py": ["tests/unit/test_records_codec.py"],
    "local/records/batch.py": ["tests/unit/test_records_codec.py", "tests/unit/test_record_batch.py"],
    # Kafka's LogValidator on append (the fast path's Python definitions are held to the C build by test_fastwalk)
    "local/validation.py": ["tests/unit/test_validation.py", "tests/property/test_fastwalk.py"],
    # index lookup and entry-size detection
    "local/index/offset_index.py": ["tests/unit/test_offset_index.py", "tests/property/test_index_props.py"],
    "local/index/time_index.py": ["tests/unit/test_time_index.py", "tests/property/test_index_props.py"],
    "local/index/detect.py": ["tests/unit/test_detect_entry_size.py", "tests/unit/test_detect_boundaries.py"],
    # segment recovery: of one segment, and of a log (swap files, the segments after a bad one, recovery points)
    "local/segment.py": ["tests/unit/test_segment.py", "tests/property/test_segment_recovery.py"],
    "local/loader.py": ["tests/unit/test_loader.py", "tests/unit/test_parallel_loading.py"],
    # leader epochs
    "local/epoch.py": ["tests/unit/test_log.py", "tests/unit/test_leader_epochs.py"],
    # retention of both tiers, the remote read path
    "local/log.py": [
        "tests/unit/test_log.py", "tests/unit/test_log_paths.py", "tests/unit/test_retention.py",
        "tests/unit/test_leader_epochs.py", "tests/unit/test_log_retention_rules.py",
    ],
    "tiered/remote_log_manager.py": ["tests/unit/test_retention.py", "tests/unit/test_remote_tier.py"],
    # the remote read path: the remote tier's reads, the damaged and short objects, the reads racing expiration
    "tiered/remote_log_reader.py": [
        "tests/unit/test_remote_reader_rules.py",
        "tests/unit/test_remote_tier.py",
        "tests/unit/test_verified_reads.py",
        "tests/unit/test_remote_integrity.py",
        RLM + "test_a_remote_read_racing_remote_expiration_never_returns_later_data",
        RLM + "test_a_local_read_overtaken_by_local_retention_goes_remote",
    ],
    # remote retention: time, size, below the log start, outside the leader-epoch lineage
    "tiered/rlm_expiration.py": [
        "tests/unit/test_retention.py",
        RT + "test_remote_retention_advances_log_start",
        RT + "test_offload_local_retention_and_reads_through_both_tiers",
        RLM + "test_a_manager_with_the_remote_tier_copies_and_expires_by_itself",
        RLM + "test_remote_expiration_moves_and_checkpoints_the_log_start_before_deleting",
        RLM + "test_after_a_failed_checkpoint_no_later_pass_deletes_until_one_succeeds",
        RLM + "test_a_remote_read_racing_remote_expiration_never_returns_later_data",
    ],
    # the copy to the remote tier: failed, crashed and oversized copies, the quota, the checksums it records
    "tiered/rlm_copy.py": [
        "tests/unit/test_copy_rules.py",
        "tests/unit/test_copy_crashes.py",
        "tests/unit/test_remote_tier.py",
        "tests/unit/test_remote_quotas.py",
        "tests/unit/test_remote_integrity.py",
        "tests/unit/test_remote_safety.py",
        RLM + "test_a_manager_with_the_remote_tier_copies_and_expires_by_itself",
        RLM + "test_close_stops_the_tasks_before_the_logs_close",
    ],
    # the RSM bounds (and the metadata rules beside them)
    "tiered/rsm.py": [
        "tests/unit/test_rsm_bounds.py",
        "tests/unit/test_rsm_types.py",
        RT + "test_state_transitions_and_idempotent_repeats",
        RT + "test_segment_size_clamped_to_int32_with_a_warning",
        RT + "test_plugin_with_neither_fetch_variant_is_refused",
        RT + "test_stale_started_copy_after_a_crash_is_cleaned",
    ],
    # both caches
    "tiered/cache/index_cache.py": [
        "tests/unit/test_index_cache.py",
        RT + "test_index_cache_reads_8_and_12_byte_indexes_from_one_bucket",
        RT + "test_index_cache_loads_time_and_txn_indexes_on_first_use",
        RT + "test_index_cache_evicts_by_bytes_and_refetches_corrupt",
    ],
    "tiered/cache/chunk_cache.py": ["tests/unit/test_chunk_cache.py"],
    # the chunk cache's parts: their own tests first (fast), then the cache's, which use them all
    **{
        f"tiered/cache/{part}.py": ["tests/unit/test_chunk_cache_parts.py", "tests/unit/test_chunk_cache.py"]
        for part in ("chunk_memory", "chunk_stream", "disk_store", "single_flight")
    },
}

_STATUS = re.compile(r"^\s+(\S+): (\S.*)$")


def _mutmut_table(module: str, tests: list[str]) -> str:
    args = ", ".join(f'"{t}"' for t in tests)
    return (
        "[tool.mutmut]\n"
        'source_paths = ["local", "tiered"]\n'
        f'only_mutate = ["{module}"]\n'
        f"pytest_add_cli_args_test_selection = [{args}]\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
        "use_git_change_detection = false\n"
    )


def _without_mutmut_table(text: str) -> str:
    """``pyproject.toml`` without its ``[tool.mutmut]`` table (replaced by the per-module one)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            out.append(line)
    return "".join(out)


def _scratch_copy(module: str, tests: list[str]) -> Path:
    work = Path(tempfile.mkdtemp(prefix="tiered-mutmut-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "mutants")
    for name in ("local", "tiered", "tests"):
        shutil.copytree(ROOT / name, work / name, ignore=ignore)
    text = _without_mutmut_table((ROOT / "pyproject.toml").read_text())
    (work / "pyproject.toml").write_text(text.rstrip("\n") + "\n\n" + _mutmut_table(module, tests))
    return work


def run_module(module: str, tests: list[str], jobs: int, keep: bool,
               only: list[str] | None = None) -> tuple[int, int, list[str]]:
    """Mutate ``module`` against ``tests`` (only the mutants whose names match a glob of ``only``, when given);
    returns (killed, tested, survivors)."""
    tests = [t for t in tests if t.startswith("-") or (ROOT / t.split("::")[0]).exists()]
    work = _scratch_copy(module, tests)
    try:
        print(f"### {module} against {' '.join(tests)} (in {work})", flush=True)
        run = subprocess.run(
            ["mutmut", "run", "--max-children", str(jobs), *(only or [])], cwd=work, capture_output=True, text=True
        )
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-4000:], sep="\n")
            raise SystemExit(f"mutmut run failed on {module} (exit {run.returncode})")
        res = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, capture_output=True, text=True, check=True)
        statuses = {m.group(1): m.group(2) for m in map(_STATUS.match, res.stdout.splitlines()) if m}
        if only:  # mutmut lists every mutant it generated; the score is over the ones run
            statuses = {n: s for n, s in statuses.items() if any(fnmatch.fnmatchcase(n, g) for g in only)}
        killed = sum(1 for s in statuses.values() if s in ("killed", "timeout", "caught by type check", "segfault"))
        skipped = sum(1 for s in statuses.values() if s in ("skipped", "not checked"))
        tested = len(statuses) - skipped
        survivors = sorted(n for n, s in statuses.items() if s in ("survived", "no tests", "suspicious"))
        score = 100.0 * killed / tested if tested else 0.0
        print(f"{module}: {killed}/{tested} mutants killed ({score:.1f}%), {len(survivors)} survived", flush=True)
        for name in survivors:
            show = subprocess.run(["mutmut", "show", name], cwd=work, capture_output=True, text=True)
            print(show.stdout.rstrip(), flush=True)
        return killed, tested, survivors
    finally:
        if keep:
            print(f"(kept {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all of {len(MODULES)})")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested in parallel (mutmut --max-children)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy for mutmut show/browse")
    parser.add_argument("--tests", nargs="+", help="override the test selection (with one module)")
    parser.add_argument("--only", nargs="+", metavar="GLOB",
                        help="mutate only the functions whose mutant names match (mutmut's names: "
                             "'local.log.xǁLogǁtruncate_to__mutmut_3'; e.g. '*truncate*')")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if shutil.which("mutmut") is None:
        print("mutmut is not installed: pip install 'tiered[bench]'", file=sys.stderr)
        return 2
    modules = args.modules or list(MODULES)
    unknown = [m for m in modules if not (ROOT / m).is_file()]
    if unknown:
        print(f"no such module: {', '.join(unknown)}", file=sys.stderr)
        return 2
    total_killed = total_tested = 0
    for module in modules:
        tests = args.tests or MODULES.get(module) or ["tests/unit", "tests/property"]
        killed, tested, _ = run_module(module, tests, args.jobs, args.keep, args.only)
        total_killed += killed
        total_tested += tested
    if len(modules) > 1 and total_tested:
        print(f"total: {total_killed}/{total_tested} killed ({100.0 * total_killed / total_tested:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
