"""The seam between the local log and a remote tier.

``local`` knows nothing of object stores. A remote tier (``tiered.RemoteLogManager``) implements
:class:`RemoteTier`; the log consults it for offsets below its local log start offset and asks it what may be
deleted locally. A LogManager with a remote tier starts the tier's own copy and expiration tasks with
:meth:`RemoteTier.start_tasks` when its scheduler starts, and stops them with :meth:`RemoteTier.stop_tasks` on
``close()``, before it closes the logs.

How a LogManager gets its remote tier when ``remote.log.storage.system.enable`` is true, first that applies:

1. ``LogManager(config, remote_tier=tier)``: built by the caller (``tiered.composition.build_remote_tier``).
2. ``LogManager(config, remote_tier_factory=factory)``: a :class:`RemoteTierFactory` the manager calls once it
   knows where the tier's caches go (``tiered.open_log_manager`` passes ``tiered``'s composition root).
3. ``remote.log.tier.factory=module:attr`` in the config: the dotted path of such a factory, which the operator
   names (to choose among several installed tiers, or where package metadata is not installed).
4. The one factory installed under the entry point group ``local.remote_tier`` (``tiered`` declares its
   composition root there in its package metadata). None installed, or several: a ``ConfigError`` saying what to do.

``local`` imports no remote tier by a name of its own making: it is handed one, or finds the one installed.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from local.errors import ConfigError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from local.config import LogConfig
    from local.fetch import FetchDataInfo, FetchIsolation, TimestampAndOffset
    from local.log import Log

#: The entry point group a remote tier's package declares its :class:`RemoteTierFactory` under.
ENTRY_POINT_GROUP = "local.remote_tier"
FACTORY_KEY = "remote.log.tier.factory"


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

    def start_tasks(self, logs: Callable[[], Iterable[Log]]) -> None:
        """Start copying and expiring the logs ``logs()`` returns (called again, it does nothing) on the tier's own
        threads, every ``remote.log.manager.task.interval.ms``; ``logs`` is asked again as partitions come and go."""
        ...

    def stop_tasks(self) -> None:
        """Stop those tasks, waiting for the runs in progress; nothing may touch the logs after it returns."""
        ...


class RemoteTierFactory(Protocol):
    """Builds the remote tier of ``config``. ``cache_root``: where its caches go instead of the first data dir
    (a read-only manager passes its scratch dir: it writes nothing into the data dirs)."""

    def __call__(self, config: LogConfig, cache_root: Path | None = None) -> RemoteTier: ...


def find_remote_tier_factory(config: LogConfig) -> RemoteTierFactory:
    """The factory of steps 3 and 4 of the module docstring. Raises ``ConfigError`` naming what to do."""
    configured = (config.remote_tier_factory or "").strip()
    if configured:
        return _import_factory(configured)
    found = _installed_factories()
    if len(found) == 1:
        factory: RemoteTierFactory = found[0].load()
        return factory
    if not found:
        raise ConfigError(
            "remote.log.storage.system.enable is true but no remote tier is installed (no entry point in group "
            f"{ENTRY_POINT_GROUP!r}): install the tiered package (pip install -e . in its checkout), or pass "
            "LogManager(config, remote_tier=tiered.build_remote_tier(config)), or use tiered.open_log_manager(config), "
            f"or set {FACTORY_KEY}=tiered.composition:build_remote_tier",
            key="remote.log.storage.system.enable", value="true",
        )
    names = ", ".join(f"{ep.name} ({ep.value})" for ep in found)
    raise ConfigError(f"several remote tiers are installed ({names}): name one with {FACTORY_KEY}=module:attr",
                      key=FACTORY_KEY, value="")


@functools.lru_cache(maxsize=1)
def _installed_factories() -> tuple[EntryPoint, ...]:
    from importlib.metadata import entry_points

    # Deduplicated by value: an editable install seen twice on sys.path is one factory.
    unique = {ep.value: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return tuple(unique.values())


def _import_factory(path: str) -> RemoteTierFactory:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"Invalid value {path} for configuration {FACTORY_KEY}: expected module:attribute "
                          "(e.g. tiered.composition:build_remote_tier)", key=FACTORY_KEY, value=path)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Invalid value {path} for configuration {FACTORY_KEY}: cannot load it: {exc}",
                          key=FACTORY_KEY, value=path) from exc
    if not callable(obj):
        raise ConfigError(f"Invalid value {path} for configuration {FACTORY_KEY}: {path} is not callable",
                          key=FACTORY_KEY, value=path)
    factory: RemoteTierFactory = obj
    return factory
