"""Running a streaming read to a Parquet sink in the Spark tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_to_parquet(stream: Any, out: Path, checkpoint: Path) -> list[int]:
    """Run ``stream`` into Parquet files under ``out`` until it has read all there is (restarting from
    ``checkpoint`` when it holds offsets); the rows of each micro-batch that read any."""
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0 seconds").start())
    try:
        query.processAllAvailable()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
