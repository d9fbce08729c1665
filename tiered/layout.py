"""Object keys in the remote store (pure).

``<prefix>/<topic>-<topicId>/<partition>/<20-digit start offset>-<segment id>.<suffix>`` for ``.log .index
.timeindex .txnindex .snapshot leader-epoch-checkpoint``; ids in Kafka's 22-character base64url form. A
partition's metadata events live beside its segments under ``__remote_log_metadata/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from local.checkpoint import kafka_uuid_from_str, kafka_uuid_to_str
from tiered.rsm import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

if TYPE_CHECKING:
    from tiered.store import ObjectStore

LOG_SUFFIX = ".log"
METADATA_DIR = "__remote_log_metadata"
#: A partition's owner records (:mod:`tiered.ownership`) live beside its metadata events:
#: ``__remote_log_metadata/owner-<10-digit owner epoch>.json``.
OWNER_RECORD_PREFIX = "owner-"
SEGMENT_SUFFIXES = (LOG_SUFFIX, *(t.suffix for t in IndexType))


kafka_uuid = kafka_uuid_to_str  # Kafka's Uuid.toString(): 22 url-safe base64 characters
parse_kafka_uuid = kafka_uuid_from_str


def _join(prefix: str, *parts: str) -> str:
    head = prefix.strip("/")
    return "/".join([head, *parts]) if head else "/".join(parts)


def partition_prefix(prefix: str, tip: TopicIdPartition) -> str:
    return _join(prefix, f"{tip.topic}-{kafka_uuid(tip.topic_id)}", str(tip.partition))


def segment_key(prefix: str, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    sid = metadata.remote_log_segment_id
    sep = "." if not suffix.startswith(".") else ""
    name = f"{metadata.start_offset:020d}-{kafka_uuid(sid.id)}{sep}{suffix}"
    return f"{partition_prefix(prefix, sid.topic_id_partition)}/{name}"


def segment_keys(prefix: str, metadata: RemoteLogSegmentMetadata) -> list[str]:
    return [segment_key(prefix, metadata, s) for s in SEGMENT_SUFFIXES]


def metadata_prefix(prefix: str, tip: TopicIdPartition) -> str:
    return f"{partition_prefix(prefix, tip)}/{METADATA_DIR}/"


def metadata_event_key(prefix: str, segment_id: RemoteLogSegmentId, start_offset: int, state: int) -> str:
    return f"{segment_events_prefix(prefix, segment_id, start_offset)}{state}.json"


def segment_events_prefix(prefix: str, segment_id: RemoteLogSegmentId, start_offset: int) -> str:
    """What the keys of one segment's metadata events (:func:`metadata_event_key`), and only theirs, start with."""
    return f"{metadata_prefix(prefix, segment_id.topic_id_partition)}{start_offset:020d}-{kafka_uuid(segment_id.id)}."


def metadata_event_of_key(key: str) -> tuple[int, uuid.UUID, int] | None:
    """(start offset, segment id, state) that a metadata event's key names (:func:`metadata_event_key`), or None for
    a key of another form: what is known of an event whose object cannot be read."""
    name = key.rsplit("/", 1)[-1]
    head, dot, rest = name.partition(".")
    start, dash, sid = head.partition("-")
    state, _, json = rest.partition(".")
    if not (dot and dash and json == "json" and len(start) == 20 and start.isdigit() and state.isdigit()):
        return None
    try:
        segment_id = parse_kafka_uuid(sid)
    except ValueError:
        return None
    if kafka_uuid(segment_id) != sid:  # base64 decoding forgives what the writer never writes ('+', stray bits)
        return None
    return int(start), segment_id, int(state)


def owner_records_prefix(prefix: str, tip: TopicIdPartition) -> str:
    return f"{metadata_prefix(prefix, tip)}{OWNER_RECORD_PREFIX}"


def owner_record_key(prefix: str, tip: TopicIdPartition, owner_epoch: int) -> str:
    return f"{owner_records_prefix(prefix, tip)}{owner_epoch:010d}.json"


def owner_epoch_of_key(key: str) -> int | None:
    """The owner epoch an owner record's key names, or None for a key that is not an owner record."""
    name = key.rsplit("/", 1)[-1]
    if not name.startswith(OWNER_RECORD_PREFIX) or not name.endswith(".json"):
        return None
    digits = name[len(OWNER_RECORD_PREFIX):-len(".json")]
    return int(digits) if len(digits) == 10 and digits.isdigit() else None


def topic_ids_in_store(store: ObjectStore, prefix: str, topic: str, *,
                       skip: uuid.UUID | None = None) -> dict[uuid.UUID, set[int]]:
    """Every topic id the store holds remote metadata of for ``topic``, with the partitions of each (those with a
    ``__remote_log_metadata/``): keys ``<prefix>/<topic>-<22-char id>/<partition>/__remote_log_metadata/...`` (a topic
    named ``<topic>-x`` is not mistaken for it: the id must be the whole rest of the name). ``skip``: an id left out
    (its partitions not even listed). On a store that declares ``common_prefixes`` (S3), "directory" listings only
    (:meth:`ObjectStore.list_common_prefixes`): a request for the topic's ids, one for each id's partitions and one
    for each partition, whatever their segments (a listing of every key under ``<topic>-`` took a request a thousand
    objects, at each first claim); on another, one listing of every key under ``<topic>-`` (what the directory
    listings would each be made of)."""
    head = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    if not store.capabilities.common_prefixes:
        return _topic_ids_in_keys(store.list(f"{head}{topic}-"), head, topic, skip)
    found: dict[uuid.UUID, set[int]] = {}
    for topic_dir in store.list_common_prefixes(f"{head}{topic}-"):
        id_text = topic_dir[len(head) + len(topic) + 1:-1]
        if len(id_text) != 22:
            continue
        try:
            topic_id = parse_kafka_uuid(id_text)
        except ValueError:
            continue
        if topic_id == skip:
            continue
        for partition_dir in store.list_common_prefixes(topic_dir):
            partition = partition_dir[len(topic_dir):-1]
            if not partition.isdigit():
                continue
            if f"{partition_dir}{METADATA_DIR}/" in store.list_common_prefixes(f"{partition_dir}__"):
                found.setdefault(topic_id, set()).add(int(partition))
    return found


def _topic_ids_in_keys(keys: Iterable[str], head: str, topic: str, skip: uuid.UUID | None) -> dict[uuid.UUID, set[int]]:
    """:func:`topic_ids_in_store` from every key under ``<head><topic>-``."""
    found: dict[uuid.UUID, set[int]] = {}
    for key in keys:
        parts = key[len(head):].split("/")
        if len(parts) < 4 or parts[2] != METADATA_DIR:
            continue
        id_text = parts[0][len(topic) + 1:]
        if len(id_text) != 22 or not parts[1].isdigit():
            continue
        try:
            topic_id = parse_kafka_uuid(id_text)
        except ValueError:
            continue
        if topic_id != skip:
            found.setdefault(topic_id, set()).add(int(parts[1]))
    return found
