"""Object keys as file paths on a filesystem whose names are at most 255 bytes (pure).

The remote layout's keys (``<prefix>/<topic>-<topicId>/<partition>/...``, :mod:`tiered.layout`) stay Kafka's on every
backend; an object store takes them as they are. A directory tree cannot hold a path component longer than
``NAME_MAX`` (255 bytes on Linux and macOS): a topic name may be 249 characters, and ``<topic>-<topicId>`` is then
272. So the local-directory backend (and fsspec's ``file://``) stores each component of more than 255 UTF-8 bytes as

    <the component's first 200 bytes or fewer, cut at a character boundary>~<16 hex digits of its SHA-256>

with the full component, UTF-8, in a file beside it named ``<that stored name>.tiered-name``, which a listing reads
to give the original key back (and which no key can be: it is never listed). A component of 255 bytes or fewer is
stored as it is, so every directory written before this rule reads as it did.

The local-directory backend, the ``local`` remote log metadata directory (:class:`tiered.metadata.DirectoryObjects`)
and fsspec on a local filesystem store keys this way (the Path helpers below serve the first two).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

NAME_MAX = 255
_HEAD_BYTES = 200
NAME_FILE_SUFFIX = ".tiered-name"
_STORED = re.compile(r"~[0-9a-f]{16}\Z")


def stored_name(component: str) -> str:
    """The name a path component is stored under: itself when it fits in NAME_MAX bytes, else its head and hash."""
    data = component.encode("utf-8", "surrogateescape")
    if len(data) <= NAME_MAX:
        return component
    head = data[:_HEAD_BYTES].decode("utf-8", "ignore")  # a character cut in two is left out
    return f"{head}~{hashlib.sha256(data).hexdigest()[:16]}"


def is_shortened(name: str) -> bool:
    """Whether a stored name may be a shortened component (then its ``.tiered-name`` file holds the original)."""
    return _STORED.search(name) is not None


def is_name_file(name: str) -> bool:
    return name.endswith(NAME_FILE_SUFFIX) and is_shortened(name[: -len(NAME_FILE_SUFFIX)])


def stored_parts(key: str) -> list[tuple[str, str]]:
    """``(original, stored)`` for each ``/``-separated component of ``key``."""
    return [(part, stored_name(part)) for part in key.split("/")]


def shortened(parts: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """The positions of the components of ``parts`` that are stored shortened, with their originals."""
    return [(i, original) for i, (original, stored) in enumerate(parts) if original != stored]


def path_of(root: Path, key: str) -> Path:
    """Where ``key`` is stored under ``root``."""
    return root.joinpath(*(stored for _, stored in stored_parts(key)))


def write_name_files(root: Path, key: str, write: Callable[[Path, bytes], None]) -> None:
    """Before ``key`` is written under ``root``: the original of each component stored shortened, in its name file
    (``write(path, data)`` writes a file atomically), once."""
    parts = stored_parts(key)
    for i, original in shortened(parts):
        name_file = root.joinpath(*(stored for _, stored in parts[:i]), parts[i][1] + NAME_FILE_SUFFIX)
        if not name_file.exists():
            name_file.parent.mkdir(parents=True, exist_ok=True)
            write(name_file, original.encode("utf-8"))


def key_of(root: Path, path: Path, originals: dict[Path, str]) -> str | None:
    """The key stored at ``path`` under ``root`` (None for a name file, which holds no object); ``originals``
    caches the name files read."""
    if is_name_file(path.name):
        return None
    names = []
    directory = root
    for part in path.relative_to(root).parts:
        name = part
        if is_shortened(part):
            name_file = directory / (part + NAME_FILE_SUFFIX)
            if name_file not in originals:
                try:
                    originals[name_file] = name_file.read_bytes().decode("utf-8")
                except (FileNotFoundError, UnicodeDecodeError):
                    originals[name_file] = part  # a name that only looks shortened
            name = originals[name_file]
        names.append(name)
        directory = directory / part
    return "/".join(names)
