"""Finalized feature levels per data dir: our analogue of Kafka's MetadataVersion gate for KIP-1333.

Release 4.0 = level 0 (8-byte offset index entries, ``segment.bytes`` <= 2^31-1). Release 4.4 = level 1 (the
large-index feature: new and rebuilt offset indexes use 12-byte entries, segments may exceed 2 GiB). Stored in
``tiered-features.properties`` in each data dir, written atomically; a level never goes down.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from local.errors import ConfigError, FeatureDowngradeError
from local.filenames import FEATURES_FILENAME
from local.properties import parse_properties

RELEASE_LEVELS = {"4.0": 0, "4.4": 1}


@dataclass(frozen=True, slots=True)
class FeatureLevels:
    data_dir: Path
    large_index_level: int
    release_version: str

    @property
    def large_index_finalized(self) -> bool:
        return self.large_index_level >= 1


def read_features(data_dir: str | os.PathLike[str]) -> FeatureLevels:
    path = Path(data_dir) / FEATURES_FILENAME
    if not path.exists():
        return FeatureLevels(Path(data_dir), 0, "4.0")
    props = parse_properties(path.read_text())
    try:
        level = int(props.get("large.index.level", "0"))
    except ValueError:
        raise ConfigError(f"malformed {path}: large.index.level={props.get('large.index.level')!r}", path=str(path)) from None
    return FeatureLevels(Path(data_dir), level, props.get("release.version", "4.0"))


def finalize(data_dirs: Iterable[str | os.PathLike[str]], release_version: str = "4.4") -> list[FeatureLevels]:
    """Finalize ``release_version`` in every data dir (idempotent); a downgrade is refused."""
    if release_version not in RELEASE_LEVELS:
        raise ConfigError(
            f"unknown release version {release_version!r}; known: {', '.join(RELEASE_LEVELS)}", value=release_version
        )
    level = RELEASE_LEVELS[release_version]
    dirs = [Path(d) for d in data_dirs]
    current = [read_features(d) for d in dirs]
    for cur in current:
        if cur.large_index_level > level:
            raise FeatureDowngradeError(
                f"cannot downgrade {cur.data_dir} from release {cur.release_version} (large index level "
                f"{cur.large_index_level}) to {release_version} (level {level}): finalized features never go down",
                path=str(cur.data_dir),
            )
    from local.checkpoint import atomic_write

    out = []
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        text = f"version=0\nlarge.index.level={level}\nrelease.version={release_version}\n"
        atomic_write(d / FEATURES_FILENAME, text.encode())
        out.append(FeatureLevels(d, level, release_version))
    return out


def large_index_finalized(data_dirs: Iterable[str | os.PathLike[str]]) -> bool:
    dirs = list(data_dirs)
    return bool(dirs) and all(read_features(d).large_index_finalized for d in dirs)
