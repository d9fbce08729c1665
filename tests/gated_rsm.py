"""A test-only RSM for ``tiered run`` subprocess tests: the local-directory backend whose first segment copy in a
process stops after uploading the ``.log``, says ``GATE <key>`` on stderr, and waits until the test opens the FIFO
named by ``rsm.config.gate`` for writing and closes it. Loaded by dotted path
(``remote.log.storage.manager.class.name=tests.gated_rsm.GatedDir``), in the copier process as well."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from tiered.backends.local_dir import LocalDirRemoteStorageManager


class GatedDir(LocalDirRemoteStorageManager):
    CONFIG_KEYS = (*LocalDirRemoteStorageManager.CONFIG_KEYS, "gate")

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        self.gate = self.options.string("gate", required="the FIFO the test opens to let the first copy go on")
        self.gated = False

    def put_file(self, key: str, path: Path) -> None:
        super().put_file(key, path)
        if key.endswith(".log") and not self.gated:
            self.gated = True
            print(f"GATE {key}", file=sys.stderr, flush=True)
            with open(str(self.gate), "rb") as fifo:  # blocks until the test opens it for writing
                fifo.read()
