"""DumpLogSegments: print any Kafka log-dir file, as ``kafka-dump-log.sh`` does (the logic behind ``tiered dump``).

Each ``dump_*`` function yields text lines or, with ``as_json``, one dict per item; problems (a corrupt batch, an
index entry that does not point at a batch start) are reported in the output and counted in ``DumpResult``.
The offset index format (8- or 12-byte entries) is auto-detected: a file has no metadata version to consult.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local import filenames
from local.errors import KafkaStorageError


@dataclass
class DumpResult:
    file: str
    kind: str
    items: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def file_kind(path: Path) -> str:
    name = filenames.strip_transient_suffix(path.name)
    if name.endswith(".rsm-manifest"):
        return "segment-manifest"
    if name.endswith(".indexes"):
        return "packed-indexes"
    for suffix, kind in ((".log", "log"), (".index", "offset-index"), (".timeindex", "time-index"),
                         (".txnindex", "txn-index"), (".snapshot", "producer-snapshot")):
        if name.endswith(suffix):
            return kind
    if name == filenames.LEADER_EPOCH_CHECKPOINT_FILENAME:
        return "leader-epoch-checkpoint"
    if name == filenames.PARTITION_METADATA_FILENAME:
        return "partition-metadata"
    if name == filenames.LOST_OFFSETS_FILENAME:
        return "lost-offsets"
    if name.endswith("-checkpoint"):
        return "offset-checkpoint"
    raise ValueError(f"don't know how to dump {path.name}: expected .log, .index, .timeindex, .txnindex, .snapshot, "
                     f"leader-epoch-checkpoint, partition.metadata, {filenames.LOST_OFFSETS_FILENAME}, an offset checkpoint, or a "
                     "remote segment's "
                     ".rsm-manifest or .indexes")


def dump(path: str | Path, *, deep: bool = False, verify: bool = False, max_batches: int | None = None,
         key_provider: Any = None) -> DumpResult:
    """Dump one file. A remote segment stored in the manifest format (``docs/remote-format.md``) is understood: its
    ``.rsm-manifest`` is listed, and its stored ``.log`` or ``.indexes`` (the manifest beside it) is decoded first,
    with ``key_provider`` when it is encrypted."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "segment-manifest":
        return _dump_manifest(path)
    if kind in ("log", "packed-indexes"):
        from tiered.format.stored_files import manifest_beside

        manifest = manifest_beside(path)
        if manifest is not None:
            return _dump_stored(path, manifest, key_provider, deep=deep, verify=verify, max_batches=max_batches)
        if kind == "packed-indexes":
            raise ValueError(f"{path.name}: a packed .indexes object needs its .rsm-manifest beside it")
    result = DumpResult(str(path), kind)
    base = filenames.offset_from_file_name(path.name) if kind in ("log", "offset-index", "time-index", "txn-index") else 0
    if kind == "log":
        _dump_log(path, result, deep, max_batches)
    elif kind == "offset-index":
        from local.index import LEGACY_OFFSET_ENTRY_SIZE, OffsetIndex, detect_entry_size

        size = detect_entry_size(path, LEGACY_OFFSET_ENTRY_SIZE)
        with OffsetIndex(path, base, writable=False, use_large_format=size != LEGACY_OFFSET_ENTRY_SIZE) as index:
            result.items.append({"entry_size": index.entry_size})
            entries = [index.entry(i) for i in range(index.entries)]
        _add_index_entries(path, base, [(op.offset, op.position) for op in entries], ("offset", "position"), result)
        if verify:  # (its check names a torn entry too)
            _verify_offset_index(path, base, result)
        else:
            _trailing_partial_entry(path, size, result)
    elif kind == "time-index":
        from local.index import TimeIndex

        with TimeIndex(path, base, writable=False) as tindex:
            pairs = [(te.timestamp, te.offset) for te in map(tindex.entry, range(tindex.entries))]
            _trailing_partial_entry(path, tindex.entry_size, result)
        _add_index_entries(path, base, pairs, ("timestamp", "offset"), result)
    elif kind == "txn-index":
        from local.index import TransactionIndex

        with TransactionIndex(base, path) as txn:
            for t in txn.all_aborted_txns():
                result.items.append({"version": 0, "producer_id": t.producer_id, "first_offset": t.first_offset,
                                     "last_offset": t.last_offset, "last_stable_offset": t.last_stable_offset})
    elif kind == "producer-snapshot":
        from local.producer_state import decode_snapshot

        try:
            for se in decode_snapshot(path.read_bytes(), str(path)):
                result.items.append({
                    "producer_id": se.producer_id, "producer_epoch": se.producer_epoch, "last_sequence": se.last_sequence,
                    "last_offset": se.last_offset, "offset_delta": se.offset_delta, "timestamp": se.timestamp,
                    "coordinator_epoch": se.coordinator_epoch, "current_txn_first_offset": se.current_txn_first_offset,
                })
        except KafkaStorageError as exc:
            result.problems.append(str(exc))
    elif kind == "leader-epoch-checkpoint":
        from local.checkpoint import decode_leader_epoch_checkpoint

        for ee in decode_leader_epoch_checkpoint(path.read_bytes(), str(path)):
            result.items.append({"epoch": ee.epoch, "start_offset": ee.start_offset})
    elif kind == "partition-metadata":
        from local.checkpoint import PartitionMetadataFile, kafka_uuid_to_str

        result.items.append({"version": 0, "topic_id": kafka_uuid_to_str(PartitionMetadataFile(path).read())})
    elif kind == "lost-offsets":
        from local.lost_offsets import read_lost_offsets

        for lost in read_lost_offsets(path):
            result.items.append({"first_offset": lost.first_offset, "last_offset": lost.last_offset,
                                 "position": lost.position, "segment": lost.segment})
    else:
        from local.checkpoint import OffsetCheckpointFile

        for (topic, partition), offset in sorted(OffsetCheckpointFile(path).read().items()):
            result.items.append({"topic": topic, "partition": partition, "offset": offset})
    return result


def _trailing_partial_entry(path: Path, entry_size: int, result: DumpResult) -> None:
    """A problem for bytes past the index's last whole entry (a torn write): as a .log's trailing bytes are one."""
    size = path.stat().st_size
    extra = size % entry_size
    if extra:
        result.problems.append(f"{extra} trailing bytes at position {size - extra} do not form a whole "
                               f"{entry_size}-byte entry")


def _dump_manifest(path: Path) -> DumpResult:
    from tiered.format.manifest import SegmentManifest
    from tiered.format.stored_files import manifest_items

    result = DumpResult(str(path), "segment-manifest")
    try:
        result.items.extend(manifest_items(SegmentManifest.decode(path.read_bytes())))
    except ValueError as exc:
        result.problems.append(str(exc))
    return result


def _dump_stored(path: Path, manifest: Path, key_provider: Any, **options: Any) -> DumpResult:
    """A stored object decoded through its manifest into a temporary directory, then each file dumped."""
    from local.scratch import ScratchDir
    from tiered.errors import TieredStorageError
    from tiered.format.stored_files import decode_beside

    result = DumpResult(str(path), "log" if path.name.endswith(".log") else "packed-indexes")
    with ScratchDir("tiered-dump-") as scratch:
        tmp = str(scratch.path)
        try:
            decoded = decode_beside(path, manifest, Path(tmp), key_provider)
        except (TieredStorageError, ValueError) as exc:
            result.problems.append(f"cannot decode {path.name} through {manifest.name}: {exc}")
            return result
        for file in decoded:
            inner = dump(file, **options)
            if len(decoded) > 1:
                result.items.append({"file": file.name, "type": inner.kind})
            result.items.extend(inner.items)
            result.problems.extend(f"{file.name}: {p}" if len(decoded) > 1 else p for p in inner.problems)
    return result


def _dump_log(path: Path, result: DumpResult, deep: bool, max_batches: int | None) -> None:
    from local.file_records import FileRecords
    from local.records import ControlRecordType, EndTransactionMarker

    records = FileRecords.open(path, mutable=False, file_already_exists=True)
    try:
        position = 0
        for n, batch in enumerate(records.batches(verify=False)):
            if max_batches is not None and n >= max_batches:
                return
            position = batch.position + batch.size_in_bytes
            item: dict[str, Any] = {
                "baseOffset": batch.base_offset, "lastOffset": batch.last_offset, "count": batch.records_count,
                "baseSequence": batch.base_sequence, "lastSequence": batch.last_sequence,
                "producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
                "partitionLeaderEpoch": batch.partition_leader_epoch, "isTransactional": batch.is_transactional,
                "isControl": batch.is_control_batch, "position": batch.position,
                "timestampType": "LogAppendTime" if int(batch.timestamp_type) == 1 else "CreateTime",
                "maxTimestamp": batch.max_timestamp, "size": batch.size_in_bytes, "magic": batch.magic,
                "compresscodec": batch.compression_type.name.lower(), "crc": batch.crc, "isvalid": batch.is_valid(),
            }
            if not item["isvalid"]:
                result.problems.append(f"corrupt batch at position {batch.position} (offset {batch.base_offset})")
            elif deep:
                recs = []
                for rec in batch.records():
                    r: dict[str, Any] = {"offset": rec.offset, "timestamp": rec.timestamp,
                                         "keySize": -1 if rec.key is None else len(rec.key),
                                         "valueSize": -1 if rec.value is None else len(rec.value),
                                         "sequence": rec.sequence, "headerKeys": [k for k, _ in rec.headers]}
                    if batch.is_control_batch:
                        kind = ControlRecordType.parse(rec.key)
                        if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                            marker = EndTransactionMarker.decode(kind, rec.value)
                            r["endTxnMarker"] = kind.name
                            r["coordinatorEpoch"] = marker.coordinator_epoch
                        else:
                            r["controlType"] = kind.name
                    else:
                        r["key"] = payload_text(rec.key)
                        r["payload"] = payload_text(rec.value)
                    recs.append(r)
                item["records"] = recs
            result.items.append(item)
        if position < records.size_in_bytes:
            result.problems.append(
                f"{records.size_in_bytes - position} trailing bytes at position {position} do not form a whole batch"
            )
    except KafkaStorageError as exc:
        result.problems.append(str(exc))
    finally:
        records.close_handlers()


def _add_index_entries(path: Path, base: int, pairs: list[tuple[int, int]], names: tuple[str, str],
                       result: DumpResult) -> None:
    """An offset index's (offset, position) or a time index's (timestamp, offset) entries, up to a zero-filled tail
    (preallocated space, where kafka-dump-log stops too) or the first entry no index of that kind can hold: then a
    problem saying the file is not such an index or is corrupt (exit 1), never a negative offset printed as data.
    Both kinds only grow: offsets from the base offset up, positions and timestamps from 0 up."""
    kind = "an offset index" if names[0] == "offset" else "a time index"
    previous = (-1, -1)
    for i, pair in enumerate(pairs):
        offset = pair[0] if names[0] == "offset" else pair[1]
        if i > 0 and offset == base and (pair[1] if names[0] == "offset" else pair[0]) == 0:
            break  # the zero-filled tail of an index: relative offset 0, position/timestamp 0
        why = None
        if offset < base:
            why = f"offset {offset} is below the base offset {base} of its file name"
        elif min(pair) < 0:
            why = f"{names[0] if pair[0] < 0 else names[1]} {min(pair)} is negative"
        elif pair[0] < previous[0] or pair[1] < previous[1]:
            why = f"it goes back from entry {i - 1} ({names[0]} {previous[0]}, {names[1]} {previous[1]})"
        if why is not None:
            result.problems.append(f"{path.name} is not {kind} or is corrupt: entry {i} ({names[0]} {pair[0]}, "
                                   f"{names[1]} {pair[1]}): {why}")
            return
        result.items.append({names[0]: pair[0], names[1]: pair[1]})
        previous = pair


def _verify_offset_index(path: Path, base: int, result: DumpResult) -> None:
    """``tiered verify``'s check of this one index against its segment, so both commands judge a file alike. A
    zero-filled tail (an active segment's preallocated space) passes, as kafka-dump-log stops at it."""
    from local.index import LEGACY_OFFSET_ENTRY_SIZE
    from tiered.scrub.batches import BatchScanner
    from tiered.scrub.data_dir import check_offset_index_file, scan_file

    log_path = filenames.companion_log_file(path)
    if not log_path.exists():
        result.problems.append(f"no log file {log_path.name} to verify {path.name} against")
        return
    scan = BatchScanner(str(log_path), remote=False, segment_base=base, min_offset=base, total_size=None)
    scan_file(scan, log_path)
    problems, _notes = check_offset_index_file(path, base, scan, LEGACY_OFFSET_ENTRY_SIZE, zero_tail_ok=True)
    result.problems += [p.message for p in problems]


def payload_text(data: bytes | None) -> str | None:
    """A key, value or header value as text, the one rule of ``dump`` and ``consume``: None stays None, UTF-8 is
    itself, anything else ``base64:`` and its standard base64 (self-describing: a hex string is also valid UTF-8)."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def dump_file(path: str | Path, *, deep: bool = False, max_batches: int | None = None) -> Iterator[str]:
    """Text lines for ``path``, Kafka's ``kafka-dump-log.sh`` style."""
    result = dump(path, deep=deep, max_batches=max_batches)
    yield f"Dumping {result.file}"
    for item in result.items:
        records = item.pop("records", None)
        yield " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in item.items())
        for r in records or []:
            yield "| " + " ".join(f"{k}: {v}" for k, v in r.items())
    for problem in result.problems:
        yield f"ERROR: {problem}"
