"""Private scratch directories under the system temp dir that a killed process does not leave behind for good.

A read-only manager's partition copies, a copy's empty producer snapshot, the copier process's stop file and
``tiered dump``'s index rebuilds live in directories under the system temp dir, removed when their work ends. A
process killed with SIGKILL (or a machine that lost power) never removes them. So each scratch directory holds a
lock file that its process keeps locked (``flock``) for as long as the directory lives; the kernel drops the lock
when the process dies, however it dies. The first scratch directory a process makes with a given prefix sweeps the
directories of that prefix whose lock nobody holds: the leftovers of dead processes.

The lock file is locked under a temporary name and renamed into place, so a sweeper never sees an unlocked lock
file of a live directory; a directory without one (a process between ``mkdtemp`` and the rename, or one made by an
older version) is left alone until it is a day old.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

LOCK_NAME = ".tiered-scratch.lock"
_UNLOCKED_GRACE_SECONDS = 24 * 3600  # a directory without a lock file is someone's until it is this old

_swept: set[tuple[str, str]] = set()
_swept_lock = threading.Lock()


class ScratchDir:
    """One scratch directory (:attr:`path`), locked by this process until :meth:`cleanup` (also a context
    manager). Safe to clean up twice."""

    def __init__(self, prefix: str, *, root: str | os.PathLike[str] | None = None) -> None:
        base = Path(root) if root is not None else Path(tempfile.gettempdir())
        sweep(prefix, base)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        staged = self.path / f"{LOCK_NAME}.{os.getpid()}"
        self._fd: int | None = os.open(staged, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.rename(staged, self.path / LOCK_NAME)

    def cleanup(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(fd)  # after the removal: a sweeper never sees the directory unlocked while it still exists

    def __enter__(self) -> ScratchDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def __del__(self) -> None:  # a directory nobody cleaned up: at least not kept past this object
        try:
            self.cleanup()
        except Exception:
            pass


def sweep(prefix: str, base: Path | None = None, *, force: bool = False) -> list[Path]:
    """Remove the directories named ``prefix*`` under ``base`` (the system temp dir) that their process left
    behind: a lock file nobody holds, or no lock file for more than a day. Once per prefix and base in a process
    unless ``force``. Returns what it removed."""
    base = base if base is not None else Path(tempfile.gettempdir())
    key = (prefix, str(base))
    with _swept_lock:
        if key in _swept and not force:
            return []
        _swept.add(key)
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        if _abandoned(Path(entry.path)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _abandoned(path: Path) -> bool:
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return time.time() - path.stat().st_mtime > _UNLOCKED_GRACE_SECONDS
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # its process is alive
    finally:
        os.close(fd)  # drops our lock too
    return True
