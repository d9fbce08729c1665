"""``tiered verify --remote`` against a real S3-compatible server on loopback (SeaweedFS, started from localstack/).

A partition of many small remote segments (what a topic of small segments, or a busy one, leaves): the scrub of the
remote tier (every metadata event, every object of every segment read and checked: batches, indexes, recorded
checksums) in segments per second, against raw boto3 reading every object of those segments once, one after the
other (no checks at all: the requests alone).
"""

from __future__ import annotations

import time

from bench._util import report, seaweedfs_bucket
from local import LogConfig, LogManager
from local.records import MemoryRecords, SimpleRecord

SEGMENTS = 300
SEGMENT_BYTES = 64 * 1024  # (rolled by hand: Kafka's segment.bytes is at least 1 MiB)


def main() -> None:
    from tiered.commands.verify import _remote_tier, scrub

    with seaweedfs_bucket("verify") as (_, client, bucket, props):
        config = LogConfig.from_properties(props)
        now = int(time.time() * 1000)
        with LogManager(config, start_scheduler=False) as manager:
            log = manager.get_or_create_log("verify", 0, {"remote.storage.enable": "true"})
            batch = MemoryRecords.build([SimpleRecord(now, b"k", bytes(200)) for _ in range(50)])
            for _ in range(SEGMENTS):
                for _ in range(SEGMENT_BYTES // batch.size_in_bytes):
                    log.append(batch)
                log.roll()
            copied = manager.remote_tier.run_once(manager.all_logs()).segments_copied  # type: ignore[union-attr]
            assert copied == SEGMENTS
        keys = [obj["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for obj in page.get("Contents", []) if "/__remote_log_metadata/" not in obj["Key"]]

        t = time.perf_counter()
        for key in keys:
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
        raw = time.perf_counter() - t

        rsm = _remote_tier(config)
        try:
            t = time.perf_counter()
            result = scrub([], rsm)
            ours = time.perf_counter() - t
        finally:
            rsm.close()
        assert result.ok and sum(p.remote_segments for p in result.partitions) == SEGMENTS
        report(f"verify --remote-only, {SEGMENTS} segments of {SEGMENT_BYTES // 1024} KiB", SEGMENTS / ours,
               SEGMENTS / raw, "segments/s", f"raw boto3 GET of each of their {len(keys)} objects once, in turn")


if __name__ == "__main__":
    main()
