"""The engine's errors as Kafka's error codes: one table, used by every handler (Kafka's ``Errors.forException``).

A handler answers each partition (or group, or topic) with the code of what went wrong there and goes on with the
others; only a bug in a handler reaches the server, which logs it and closes that one connection.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from local import errors as local_errors
from tiered import errors as tiered_errors

logger = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of gives its code.
_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (local_errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (local_errors.RecordBatchTooLargeError, ErrorCode.record_list_too_large),
    (local_errors.RecordTooLargeError, ErrorCode.message_too_large),
    (local_errors.CorruptRecordError, ErrorCode.corrupt_message),
    (local_errors.UnsupportedCompressionTypeError, ErrorCode.unsupported_compression_type),
    (local_errors.InvalidTimestampError, ErrorCode.invalid_timestamp),
    (local_errors.InvalidRecordError, ErrorCode.invalid_record),
    (local_errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (local_errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (local_errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (local_errors.UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (local_errors.ConfigError, ErrorCode.invalid_config),
    (tiered_errors.RemoteStorageTimeoutError, ErrorCode.request_timed_out),
    (local_errors.KafkaStorageError, ErrorCode.kafka_storage_error),
    (tiered_errors.TieredStorageError, ErrorCode.kafka_storage_error),
    (OSError, ErrorCode.kafka_storage_error),
)


def error_code(exc: BaseException) -> ErrorCode:
    """Kafka's code for ``exc``; an error the engine does not name is UNKNOWN_SERVER_ERROR, logged with its trace."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    logger.error("unexpected error answering a Kafka request: %s", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def error_message(exc: BaseException) -> str:
    """A one-line message for the response's ``error_message`` field (no trace, no paths beyond the message)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
