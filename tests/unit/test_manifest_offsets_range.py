"""A manifest whose stored offsets do not fit a 64-bit file offset is refused as a malformed manifest, naming it,
instead of an OverflowError from the read (tiered verify --remote and consume reported 'unexpected error')."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.formatutil import combo_config, metadata, segment_files, text_like, write_key_pair
from tiered.backends import load_rsm
from tiered.backends.composed import MANIFEST_SUFFIX
from tiered.errors import TieredStorageError
from tiered.format import SegmentManifest


@pytest.mark.parametrize("delta", [2**63, 2**64 - 2**20])
def test_a_stored_offset_past_the_largest_file_offset_is_a_named_error(tmp_path: Path, delta: int) -> None:
    pairs = [write_key_pair(tmp_path / "keys", "k1")]
    config = {"dir": str(tmp_path / "remote"), **combo_config("zstd+aes", pairs, 1024)}
    rsm = load_rsm("local", config)
    md = metadata(100, 199, 5000)
    rsm.copy_log_segment_data(md, segment_files(tmp_path / "seg", text_like(5000)))
    rsm.close()
    path = next((tmp_path / "remote").rglob(f"*{MANIFEST_SUFFIX}"))
    m = SegmentManifest.decode(path.read_bytes())
    offsets = list(m.stored_offsets)
    offsets[2:] = [min(o + delta, 2**64 - 1) for o in offsets[2:]]
    raw = m.encode().replace(m.to_json()["log"]["stored_offsets"].encode(),
                             __import__("base64").b64encode(__import__("struct").pack(f">{len(offsets)}Q", *offsets)))
    path.write_bytes(raw)
    reader = load_rsm("local", config)
    try:
        with pytest.raises(TieredStorageError) as info, reader.fetch_log_segment(md, 0) as s:
            s.read()
        assert path.name in str(info.value)
    finally:
        reader.close()
