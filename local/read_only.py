"""Opening a data dir without writing to it: the read-only view that ``consume``, ``status``... use.

Loading a partition writes: a crashed log is recovered (torn batches truncated, indexes rebuilt), the active
segment's indexes are resized, stray files are deleted, snapshots are taken. A command that only reads must do
none of that to the data dir it was pointed at, yet see exactly what a writer would after loading it.

So a read-only log is loaded from a private scratch copy of its partition dir (under the system temp dir,
removed on close, or by the next reader's sweep when a reader was killed: :mod:`local.scratch`): every ``.log`` file is a symbolic link to the original, opened ``O_RDONLY`` (the kernel
refuses any write through it; recovery bounds a torn segment in memory instead of truncating it, see
:meth:`local.file_records.FileRecords.truncate_to`); the index files are copied (recovery and resizing write them
in place), so what the loader writes lands in the copy; the other files the loader reads (snapshots, checkpoints,
``partition.metadata``, ``remote-log-state``, topic config), which are only ever replaced whole by a rename or
deleted, are hard links where the filesystem allows (a fifteenth of a copy's cost), else copies. ``.deleted`` files are left out (they are gone to readers already), and so
are the transient ``.tmp`` files of an interrupted atomic write.

Nothing here takes the data dir's lock: a reader may run beside the writer that holds it. It sees the files as
they were when it opened them (a log end offset fixed at load); segments a running writer deletes afterwards
stay readable through the open descriptors until the reader closes.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

from local import filenames
from local.scratch import ScratchDir

_roots: dict[Path, ScratchDir] = {}
_roots_lock = threading.Lock()


def make_scratch_root() -> Path:
    """A fresh private directory for the scratch copies of one read-only manager (a :class:`local.scratch.ScratchDir`:
    what a killed reader leaves, the next one sweeps)."""
    scratch = ScratchDir("tiered-read-only-")
    with _roots_lock:
        _roots[scratch.path] = scratch
    return scratch.path


def scratch_partition_dir(source: Path, scratch_root: Path) -> Path:
    """A scratch copy of partition dir ``source`` under ``scratch_root`` (see the module docstring)."""
    target = scratch_root / source.parent.name.replace(os.sep, "_") / source.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in os.scandir(source):
        name = entry.name
        if not entry.is_file(follow_symlinks=False):
            continue
        if name.endswith(filenames.DELETED_FILE_SUFFIX) or name.endswith(".tmp"):
            continue
        if name.endswith(filenames.LOG_FILE_SUFFIX) or filenames.LOG_FILE_SUFFIX + "." in name:
            os.symlink(os.path.abspath(entry.path), target / name)  # a relative data dir must not break it
        elif any(suffix in name for suffix in filenames.INDEX_SUFFIXES):  # also .index.swap, .timeindex.cleaned...
            _copy(entry.path, os.path.join(target, name))
        else:
            _link_or_copy(entry.path, os.path.join(target, name))
    return target


def _link_or_copy(source: str, target: str) -> None:
    """A hard link to a file the loader only reads, deletes or replaces whole (producer snapshots, checkpoints,
    ``partition.metadata``, ``remote-log-state``: every write of them is a rename of a new file,
    :func:`local.checkpoint.atomic_write`), so the scratch copy can never change the original, and the writer's own
    replacements do not change the reader's view either. A copy where a link cannot be made (another filesystem)."""
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        _copy(source, target)


def _copy(source: str, target: str) -> None:
    """Copy a file's bytes and times (what the loader may look at): ``shutil.copy2`` without its buffered opens,
    permission and extended-attribute copies, which made up most of a read-only open of a partition of small
    files (``bench/RESULTS.md``)."""
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(src)
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            copied = 0
            while copied < st.st_size:
                n = os.sendfile(dst, src, copied, st.st_size - copied)
                if n == 0:  # the file shrank meanwhile (a writer truncating it): what is there is the copy
                    break
                copied += n
        finally:
            os.close(dst)
    finally:
        os.close(src)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def remove_scratch_root(scratch_root: Path) -> None:
    with _roots_lock:
        scratch = _roots.pop(scratch_root, None)
    if scratch is not None:
        scratch.cleanup()
    else:
        shutil.rmtree(scratch_root, ignore_errors=True)
