"""The columnar copy of a topic: its remote segments as Parquet files that Spark's own reader reads at full speed.

Opt-in per topic (``remote.log.columnar.enable=true``, with ``remote.storage.enable=true``); kept by the engine,
in each partition's copy task after it copies (:mod:`tiered.columnar.keeper`); placed by the broker config
(:mod:`tiered.columnar.location`); listed by a per-partition manifest that readers trust alone
(:mod:`tiered.columnar.manifest`); checked by ``tiered verify`` (:mod:`tiered.columnar.scrub`); read together with
the rest of the log by :func:`tiered.spark.read_topic`. See docs/columnar.md.
"""

from __future__ import annotations

from tiered.columnar.location import check_topic, columnar_root
from tiered.columnar.manifest import ColumnarFile, Manifest, partition_dir, read_manifest

__all__ = ["ColumnarFile", "Manifest", "check_topic", "columnar_root", "partition_dir", "read_manifest"]
