"""LocalDirStore.list (os.scandir) against the listing it replaced (Path.rglob, a Path and a stat per entry), on
random trees of keys: long components stored shortened, temp files of writes in flight, prefixes that are
directories, parts of names, or absent."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tiered.backends.local_dir import LocalDirStore
from tiered.backends.long_names import key_of


def _rglob_listing(store: LocalDirStore, prefix: str) -> list[str]:
    base = store._base
    start = store._path(prefix.rstrip("/")) if prefix.strip("/") else base
    search = start if start.is_dir() else start.parent
    if not search.exists():
        return []
    out = []
    originals: dict[Path, str] = {}
    for path in search.rglob("*"):
        if path.is_file() and not path.name.endswith(".tmp"):
            key = key_of(base, path, originals)
            if key is not None and key.startswith(prefix):
                out.append(key)
    return sorted(out)


_PART = st.one_of(st.sampled_from(["a", "b", "ab", "0", "00000000000000000000-x.1.json", "p-é"]),
                  st.text("xyzé-", min_size=250, max_size=300))  # some longer than a file name can be
_KEY = st.lists(_PART, min_size=1, max_size=4).map("/".join)


@settings(max_examples=60, deadline=None)
@example(keys=["a"], temps=[], prefixes=["a/x", "a/"])  # a prefix below an object: nothing, as rglob gives
@given(keys=st.lists(_KEY, max_size=12), temps=st.lists(_KEY, max_size=3),
       prefixes=st.lists(st.one_of(_KEY, _KEY.map(lambda k: k + "/"), st.sampled_from(["", "a", "a/", "x/y"])),
                         min_size=1, max_size=4))
def test_listing_matches_the_rglob_listing(keys: list[str], temps: list[str], prefixes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = LocalDirStore()
        store.configure({"dir": root})
        written = set()
        for key in keys:
            if any(key.startswith(k + "/") or k.startswith(key + "/") for k in written):
                continue  # a key cannot be both a file and a directory
            store.put(key, key.encode())
            written.add(key)
        for key in temps:
            path = store._path(key)
            if path.parent.is_dir():
                (path.parent / (path.name[:100] + ".x.tmp")).write_bytes(b"in flight")
        for prefix in prefixes:
            assert store.list(prefix) == _rglob_listing(store, prefix)
        assert store.list("") == sorted(written)
