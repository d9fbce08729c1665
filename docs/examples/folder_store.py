"""An object store of your own: five methods, objects as files under a folder.

The example of ``docs/custom-rsm.md``; tests/unit/test_custom_store.py runs the conformance suite over it and drives
it through the ``tiered`` CLI with compression and encryption on. Configure it with::

    remote.log.storage.manager.class.name=store
    rsm.config.store.class=folder_store.FolderStore
    rsm.config.store.root=/srv/tier
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from tiered import ObjectStore
from tiered.errors import ObjectNotFoundError


class FolderStore(ObjectStore):
    def configure(self, props: Mapping[str, str]) -> None:
        self.root = Path(props["root"])

    def _path(self, key: str) -> Path:
        return self.root / key

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data if isinstance(data, bytes) else data.read())
        os.replace(tmp, path)  # a reader sees the old object or the new one, never half of it

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(end_inclusive - start + 1)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"no object {key!r} in {self.root}", key=key) from None

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(f"no object {key!r} in {self.root}", key=key) from None

    def list(self, prefix: str) -> Iterator[str]:
        for path in self.root.rglob("*"):
            key = path.relative_to(self.root).as_posix()
            if path.is_file() and key.startswith(prefix) and not path.name.endswith(".tmp"):
                yield key

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
