"""What one run of the remote tier's copy and expiration tasks did (:class:`PassResult`), added up by whoever runs
them: ``tiered offload`` per pass, ``tiered run`` per interval from the manager's running totals."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class PassResult:
    """What one run of the copy and expiration tasks did."""

    segments_copied: int = 0
    bytes_copied: int = 0
    segments_deleted: int = 0
    copy_errors: int = 0
    stale_copies_cleaned: int = 0
    # Runs that did nothing because this data dir does not own the partition's remote data, or because the store
    # lacks it (tiered.ownership): the reason is the partition's state in RemoteLogManager.ownership.
    not_owned: int = 0

    def add(self, other: PassResult) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, earlier: PassResult) -> PassResult:
        """What was done after ``earlier``, an earlier copy of the same running totals (``tiered run`` records
        its scheduled tasks' work per interval from the manager's totals)."""
        return PassResult(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in dataclasses.fields(self)})
