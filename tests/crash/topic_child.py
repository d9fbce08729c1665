"""The process the topic crash test kills: ``python topic_child.py DATA_DIRS OP STEP``.

``DATA_DIRS`` (comma-separated) hold topic ``t``; ``OP`` is ``create`` (``t``'s 6 partitions made) or ``delete``
(its 6 partitions deleted, as tiered run's DeleteTopics does); it stops at ``STEP``, prints ``STOPPED <step>`` and
waits for the test's SIGKILL (nothing of ours runs after). Steps:

- ``made``: three partition dirs made (create) or deleted (delete), the others not;
- ``rmtree``: (delete) the first partition dir renamed ``-delete`` and half removed;
- ``intent``: the intent written into the first data dir only (nothing made or deleted yet);
- ``commit``: (create) every partition made, the first (primary) data dir's intent removed, the others' not.

Reaching the end without stopping prints ``DONE`` (a failure for the test).
"""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from local import LogConfig, LogManager

PARTITIONS = 6


def props(data_dirs: str) -> dict[str, str]:
    return {"log.dirs": data_dirs}


def _stop(step: str) -> None:
    print(f"STOPPED {step}", flush=True)
    while True:  # the parent's SIGKILL ends this
        signal.pause()


def main(data_dirs: str, op: str, step: str) -> None:
    import local.manager
    from local import topic_intents

    manager = LogManager(LogConfig.from_properties(props(data_dirs)), start_scheduler=False)
    done: list[int] = []
    if step == "intent":
        def write_first(dirs: Any, *args: Any) -> Any:
            topic_intents.write_intents(dirs[:1], *args)
            _stop(step)

        local.manager.write_intents = write_first  # type: ignore[attr-defined]
    if step == "commit":
        def remove_first(paths: Any) -> None:
            topic_intents.remove_intents(paths[:1])
            _stop(step)

        local.manager.remove_intents = remove_first  # type: ignore[attr-defined]
    if op == "create":
        # (where each partition is made: get_or_create_log before the intents, which this test showed was not whole)
        name = "_create_log" if hasattr(LogManager, "_create_log") else "get_or_create_log"
        create = getattr(LogManager, name)

        def creating(self: LogManager, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
            made = create(self, topic, partition, *args, **kwargs)
            done.append(partition)
            if len(done) == 3 and step == "made":
                _stop(step)
            return made

        setattr(LogManager, name, creating)
        manager.create_partitions("t", range(PARTITIONS))
    else:
        delete = LogManager.delete_log
        rmtree = shutil.rmtree

        def half_removing(path: Any, *args: Any, **kwargs: Any) -> None:
            files = sorted(Path(path).iterdir())
            for f in files[: len(files) // 2]:
                f.unlink()
            _stop(step)

        def deleting(self: LogManager, topic: str, partition: int) -> None:
            if step == "rmtree":
                shutil.rmtree = half_removing  # type: ignore[assignment]
            delete(self, topic, partition)
            shutil.rmtree = rmtree  # type: ignore[assignment]
            done.append(partition)
            if len(done) == 3 and step == "made":
                _stop(step)

        LogManager.delete_log = deleting  # type: ignore[method-assign]
        if hasattr(manager, "delete_partitions"):
            manager.delete_partitions("t", list(range(PARTITIONS)))
        else:  # (as tiered run's DeleteTopics deleted them before)
            for p in range(PARTITIONS):
                manager.delete_log("t", p)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
