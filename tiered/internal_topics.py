"""The topics no client writes to: the coordinators' own (``__consumer_offsets``, ``__transaction_state``), and the
KRaft metadata log a Kafka data dir may hold (``__cluster_metadata``, never shown to clients). The Kafka listener,
``tiered produce`` and the HTTP endpoint refuse writes to them (Kafka's INVALID_TOPIC_EXCEPTION)."""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
HIDDEN_TOPICS = frozenset({"__cluster_metadata"})

__all__ = ["HIDDEN_TOPICS", "INTERNAL_TOPICS", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC"]
