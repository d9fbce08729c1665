"""The seam between the local log and a remote tier.

``local`` knows nothing of object stores. A remote tier (``tiered.RemoteLogManager``) implements
:class:`RemoteTier` and is handed to the log manager by configuration; the log consults it for offsets below
its local log start offset and asks it what may be deleted locally. A LogManager with a remote tier starts the
tier's own copy and expiration tasks with :meth:`RemoteTier.start_tasks` when its scheduler starts, and stops them
with :meth:`RemoteTier.stop_tasks` on ``close()``, before it closes the logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from local.fetch import FetchDataInfo, FetchIsolation, TimestampAndOffset
    from local.log import Log


@runtime_checkable
class RemoteTier(Protocol):
    """What a log needs from the remote tier. Every method may raise; the log lets errors propagate."""

    def read(
        self, log: Log, fetch_offset: int, max_bytes: int, isolation: FetchIsolation, min_one_message: bool
    ) -> FetchDataInfo:
        """Batches from ``fetch_offset`` (below the local log start offset), read from remote segments."""
        ...

    def offset_for_timestamp(self, log: Log, timestamp: int) -> TimestampAndOffset | None:
        """The earliest remote offset whose timestamp is >= ``timestamp``, or None if no remote segment has one."""
        ...

    def highest_offset_in_remote_storage(self, log: Log) -> int:
        """The last offset whose remote copy is finished (-1 if none): local retention deletes only below it."""
        ...

    def remote_log_size_bytes(self, log: Log) -> int:
        """Bytes held by finished remote segments not present locally (for retention.bytes over the whole log)."""
        ...

    def start_tasks(self, logs: Callable[[], Iterable[Log]]) -> None:
        """Start copying and expiring the logs ``logs()`` returns (called again, it does nothing) on the tier's own
        threads, every ``remote.log.manager.task.interval.ms``; ``logs`` is asked again as partitions come and go."""
        ...

    def stop_tasks(self) -> None:
        """Stop those tasks, waiting for the runs in progress; nothing may touch the logs after it returns."""
        ...
