"""The manifest format (issue 16) against raw boto3 on a real S3-compatible server on loopback (SeaweedFS).

Targets: offload with compression and encryption >= 0.5x raw ``upload_file`` of the same files (the CPU split
printed: our process's CPU in the chunk transforms vs the rest); cold sequential consume of compressed+encrypted
segments >= 0.4x a raw streaming GET of the plain ``.log``; the compression ratio on a text-like topic and on
already-compressed (producer zstd) batches, printed. Warm reads are served by the segment cache above the plugin
(plaintext), so they do not depend on the format: not measured here.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from bench._util import report
from local.records import MemoryRecords, SimpleRecord
from tests.formatutil import combo_config, metadata, segment_files, write_key_pair
from tests.integration.s3_servers import seaweedfs
from tiered.backends import load_rsm
from tiered.format import ChunkCodec

MIB = 1024 * 1024
SEGMENT = 64 * MIB  # a real segment is 1 GiB by default: per-request costs (the manifest GET) are amortised
SEGMENTS = 3
PASSES = 3


def _topic_log(size: int, compression: str | None, seed: int) -> bytes:
    """Batches of text-like records (JSON-ish orders), ``compression`` applied by the 'producer'."""
    rng = random.Random(seed)
    out = bytearray()
    i = 0
    while len(out) < size:
        records = []
        for _ in range(200):
            value = (f'{{"order":{i},"customer":"c-{rng.randrange(10_000):05d}","status":"'
                     f'{rng.choice(["new", "paid", "shipped", "delivered"])}","amount":{rng.randrange(100_000) / 100},'
                     f'"items":[{",".join(str(rng.randrange(1000)) for _ in range(rng.randrange(1, 6)))}]}}').encode()
            records.append(SimpleRecord(1_700_000_000_000 + i, None, value))
            i += 1
        out += MemoryRecords.build(records, compression or "none", base_offset=i - 200).buffer
    return bytes(out)


def _cpu_wall(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    best = (float("inf"), 0.0)
    for _ in range(PASSES):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu)
    return best


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-format-"))
    try:
        pairs = [write_key_pair(tmp / "keys", "k1")]
        logs = [_topic_log(16 * MIB, None, seed) * (SEGMENT // (16 * MIB)) for seed in range(SEGMENTS)]
        files = [segment_files(tmp / f"seg{i}", log) for i, log in enumerate(logs)]
        total = sum(len(b) for b in logs)
        (tmp / "s3").mkdir()
        with seaweedfs(tmp / "s3") as endpoint:
            client = endpoint.client()
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=bucket)
            base = {**endpoint.rsm_config(bucket, "fmt"), "multipart_chunk_size_bytes": str(8 * MIB)}
            config = {**base, **combo_config("zstd+aes", pairs, 4 * MIB)}
            rsm = load_rsm("s3", config)
            from boto3.s3.transfer import TransferConfig

            transfer = TransferConfig(multipart_chunksize=8 * MIB, max_concurrency=4)

            def raw_upload() -> None:
                for i, f in enumerate(files):
                    for p in (f.log_segment, f.offset_index, f.time_index, f.producer_snapshot_index):
                        client.upload_file(str(p), bucket, f"raw/{i}/{p.name}", Config=transfer)

            mds: list = []  # type: ignore[type-arg]

            def ours_upload() -> None:
                mds.clear()
                for f in files:
                    md = metadata(size=SEGMENT)
                    rsm.copy_log_segment_data(md, f)
                    mds.append(md)

            raw_wall, raw_cpu = _cpu_wall(raw_upload)
            our_wall, our_cpu = _cpu_wall(ours_upload)
            codec = ChunkCodec(uuid.uuid4(), level=3, data_key=bytes(32))
            t0 = time.process_time()
            for log in logs:
                for at in range(0, len(log), 4 * MIB):
                    codec.encode("log", at, log[at : at + 4 * MIB])
            transform_cpu = time.process_time() - t0
            report("offload zstd+aes (4 MiB chunks)", total / MIB / our_wall, total / MIB / raw_wall, "MiB/s",
                   "raw boto3 upload_file", 0.5)
            print(f"  CPU in this process: ours {our_cpu:.2f} s ({transform_cpu:.2f} s zstd+AES-GCM, "
                  f"{max(0.0, our_cpu - transform_cpu):.2f} s upload and the rest) vs raw {raw_cpu:.2f} s; "
                  f"wall {our_wall:.2f} s vs {raw_wall:.2f} s", flush=True)

            def raw_get() -> None:
                for i, f in enumerate(files):
                    body = client.get_object(Bucket=bucket, Key=f"raw/{i}/{f.log_segment.name}")["Body"]
                    while body.read(MIB):
                        pass

            cold = load_rsm("s3", config)

            def ours_get() -> None:
                cold.__dict__.pop("_manifests", None)  # cold: every manifest is fetched again
                for md in mds:
                    with cold.fetch_log_segment(md, 0) as s:
                        while s.read(MIB):
                            pass

            raw_read = _cpu_wall(raw_get)[0]
            our_read = _cpu_wall(ours_get)[0]
            report("cold sequential consume zstd+aes", total / MIB / our_read, total / MIB / raw_read, "MiB/s",
                   "raw boto3 streaming GET", 0.4)
            cold.close()

            _warm_reads(tmp, load_rsm("s3", base), load_rsm("s3", config), files, mds, total)

            text = rsm.manifest(mds[0])  # type: ignore[attr-defined]
            print(f"compression ratio, text-like topic (uncompressed batches): {text.size / text.stored_size:.2f}x "
                  f"({text.size} -> {text.stored_size} bytes)", flush=True)
            zstd_log = _topic_log(SEGMENT, "zstd", 99)
            zfiles = segment_files(tmp / "zseg", zstd_log)
            for heuristic in ("false", "true"):
                zrsm = load_rsm("s3", {**config, "compression.heuristic.enabled": heuristic})
                md = metadata(size=len(zstd_log))
                zrsm.copy_log_segment_data(md, zfiles)
                m = zrsm.manifest(md)  # type: ignore[attr-defined]
                print(f"compression ratio, already-compressed (producer zstd) batches, heuristic {heuristic}: "
                      f"{m.size / m.stored_size:.3f}x ({m.size} -> {m.stored_size} bytes, transforms {m.transforms})",
                      flush=True)
                zrsm.close()
            rsm.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _warm_reads(tmp: Path, plain, encrypted, files, encrypted_mds, total: int) -> None:  # type: ignore[no-untyped-def]
    """Warm sequential reads through the segment cache (its memory tier: the plaintext chunks of encrypted segments
    stay off the disk by default), of zstd+aes segments against the same segments stored plain."""
    from bench._util import best_of
    from tiered.cache.chunk_cache import ChunkCache

    plain_mds = []
    for f in files:
        md = metadata(size=SEGMENT)
        plain.copy_log_segment_data(md, f)
        plain_mds.append(md)

    def pass_over(cache: ChunkCache, rsm, mds) -> None:  # type: ignore[no-untyped-def]
        for i, md in enumerate(mds):
            def fetch(start: int, end: int, md=md) -> bytes:  # type: ignore[no-untyped-def]
                with rsm.fetch_log_segment(md, start, end) as stream:
                    return bytes(stream.read())
            for at in range(0, SEGMENT, MIB):
                cache.read(f"seg-{i}", SEGMENT, at, at + MIB - 1, fetch)

    rates = {}
    for name, rsm, mds in (("plain", plain, plain_mds), ("zstd+aes", encrypted, encrypted_mds)):
        cache = ChunkCache(tmp / f"cache-{name}", chunk_size=4 * MIB, memory_bytes=2 * total, prefetch_chunks=0,
                           disk=False)
        pass_over(cache, rsm, mds)  # cold: fills the memory tier
        rates[name] = total / MIB / best_of(lambda c=cache, r=rsm, m=mds: pass_over(c, r, m), 3)
        cache.close()
        rsm.close()
    report("warm sequential read through the segment cache, zstd+aes", rates["zstd+aes"], rates["plain"], "MiB/s",
           "the same segments stored plain")  # target: unchanged, within noise


if __name__ == "__main__":
    main()
