"""The records of ``__transaction_state``: Kafka's ``TransactionLog`` key and value (the JSON
schemas ``TransactionLogKey`` and ``TransactionLogValue`` of Kafka's transaction-coordinator).

Byte layout (protocol/message_codec.py for the field encodings). Key = int16 version (0) +
``TransactionLogKey``: transactionalId string. Value = int16 version + ``TransactionLogValue``,
or null (a tombstone: the transactional id expired and is removed):

- v0: producerId int64, producerEpoch int16, transactionTimeoutMs int32, transactionStatus int8
  (:class:`TransactionStatus`), transactionPartitions nullable array of (topic string,
  partitionIds array of int32), transactionLastUpdateTimestampMs int64,
  transactionStartTimestampMs int64;
- v1 (flexible: compact strings and arrays, tagged fields after each struct): the same fields,
  plus the tagged fields previousProducerId int64 (tag 0, default -1), nextProducerId int64
  (tag 1, default -1) and clientTransactionVersion int16 (tag 2, default 0). A tagged field is
  written only when it differs from its default, as Kafka does; tags this module does not know
  are kept and written back. v0 cannot hold the tagged fields: writing v0 leaves them out.

Kafka writes v0 until ``transaction.version`` 1 is enabled, then v1; an ``Empty`` transaction
has null partitions. Errors as in group_metadata_record.py (:class:`CorruptCoordinatorRecordError`
naming the record's topic, partition and offset), also for a status id Kafka does not define.
Values are frozen dataclasses; the functions are pure and thread-safe.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from broker_embedded.coordinator.coordinator_partition import TRANSACTION_STATE_TOPIC
from broker_embedded.coordinator.group_metadata_record import RecordPlace, corrupt, decoding
from broker_embedded.protocol.message_codec import (
    INT16,
    INT64,
    MessageEncodeError,
    MessageFormatError,
    MessageReader,
    MessageWriter,
    TaggedFields,
    check_version,
    pack_int,
    tagged_int,
    unknown_tags,
    version_prefixed,
)

KEY_VERSION = 0
VALUE_VERSIONS = range(0, 2)
FLEXIBLE_VERSION = 1
TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
KNOWN_TAGS = (TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TRANSACTION_VERSION)


def place_in_log(partition: int | None = None, offset: int | None = None) -> RecordPlace:
    """A record of ``__transaction_state``, for error messages."""
    return RecordPlace(TRANSACTION_STATE_TOPIC, partition, offset)


class TransactionStatus(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (``transactionStatus``)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TxnPartitions:
    """The partitions of one topic in a transaction."""

    topic: str
    partition_ids: tuple[int, ...]
    unknown_tagged_fields: TaggedFields = ()


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """A transactional id's state (``TransactionLogValue``); ``partitions`` None = null."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: TransactionStatus
    partitions: tuple[TxnPartitions, ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    version: int = 0
    unknown_tagged_fields: TaggedFields = ()


def encode_key(key: TransactionLogKey) -> bytes:
    return version_prefixed(
        KEY_VERSION, lambda w: w.string(key.transactional_id, False, "transactionalId")
    )


def decode_key(
    data: bytes | memoryview | None, place: RecordPlace | None = None
) -> TransactionLogKey:
    if data is None:
        raise corrupt(place, "key", "the key is null (every record of this topic has a key)")

    def read() -> TransactionLogKey:
        r = MessageReader(data)
        version = r.int16("key version")
        if version != KEY_VERSION:
            raise MessageFormatError(f"TransactionLogKey version {version} is not 0")
        return TransactionLogKey(r.string(False, "transactionalId"))

    return decoding(place or place_in_log(), "key", read)


def _write_partitions(p: TxnPartitions, flexible: bool, w: MessageWriter) -> None:
    w.string(p.topic, flexible, "topic")
    w.array(p.partition_ids, flexible, "partitionIds", lambda i: w.int32(i, "partition id"))
    if flexible:
        w.tagged_fields(dict(p.unknown_tagged_fields))


def _read_partitions(r: MessageReader, flexible: bool) -> TxnPartitions:
    topic = r.string(flexible, "topic")
    ids = r.array(flexible, "partitionIds", lambda: r.int32("partition id"))
    tagged = unknown_tags(r.tagged_fields("PartitionsSchema"), ()) if flexible else ()
    return TxnPartitions(topic, ids, tagged)


def _tagged(v: TransactionLogValue) -> dict[int, bytes]:
    fields = dict(v.unknown_tagged_fields)
    if v.previous_producer_id != -1:
        fields[TAG_PREVIOUS_PRODUCER_ID] = pack_int(
            INT64, v.previous_producer_id, "previousProducerId"
        )
    if v.next_producer_id != -1:
        fields[TAG_NEXT_PRODUCER_ID] = pack_int(INT64, v.next_producer_id, "nextProducerId")
    if v.client_transaction_version != 0:
        fields[TAG_CLIENT_TRANSACTION_VERSION] = pack_int(
            INT16, v.client_transaction_version, "clientTransactionVersion"
        )
    return fields


def _write_value(v: TransactionLogValue, w: MessageWriter) -> None:
    flexible = v.version >= FLEXIBLE_VERSION
    w.int64(v.producer_id, "producerId")
    w.int16(v.producer_epoch, "producerEpoch")
    w.int32(v.transaction_timeout_ms, "transactionTimeoutMs")
    w.int8(int(v.status), "transactionStatus")
    w.array(
        v.partitions,
        flexible,
        "transactionPartitions",
        lambda p: _write_partitions(p, flexible, w),
        nullable=True,
    )
    w.int64(v.last_update_timestamp_ms, "transactionLastUpdateTimestampMs")
    w.int64(v.start_timestamp_ms, "transactionStartTimestampMs")
    if flexible:
        w.tagged_fields(_tagged(v))


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    """The value bytes (version-prefixed); ``None`` for a tombstone."""
    if value is None:
        return None
    check_version(value.version, VALUE_VERSIONS, "TransactionLogValue", MessageEncodeError)
    return version_prefixed(value.version, lambda w: _write_value(value, w))


def _status(raw: int) -> TransactionStatus:
    try:
        return TransactionStatus(raw)
    except ValueError:
        raise MessageFormatError(f"transactionStatus {raw} is not a transaction state") from None


def _read_value(r: MessageReader) -> TransactionLogValue:
    version = r.int16("value version")
    check_version(version, VALUE_VERSIONS, "TransactionLogValue")
    flexible = version >= FLEXIBLE_VERSION
    producer_id = r.int64("producerId")
    epoch = r.int16("producerEpoch")
    timeout = r.int32("transactionTimeoutMs")
    status = _status(r.int8("transactionStatus"))
    partitions = r.nullable_array(
        flexible, "transactionPartitions", lambda: _read_partitions(r, flexible)
    )
    last_update = r.int64("transactionLastUpdateTimestampMs")
    start = r.int64("transactionStartTimestampMs")
    tags = r.tagged_fields("TransactionLogValue") if flexible else {}

    def tag(t: int, s: struct.Struct, default: int, what: str) -> int:
        return tagged_int(tags[t], s, what) if t in tags else default

    return TransactionLogValue(
        producer_id,
        epoch,
        timeout,
        status,
        partitions,
        last_update,
        start,
        previous_producer_id=tag(TAG_PREVIOUS_PRODUCER_ID, INT64, -1, "previousProducerId"),
        next_producer_id=tag(TAG_NEXT_PRODUCER_ID, INT64, -1, "nextProducerId"),
        client_transaction_version=tag(
            TAG_CLIENT_TRANSACTION_VERSION, INT16, 0, "clientTransactionVersion"
        ),
        version=version,
        unknown_tagged_fields=unknown_tags(tags, KNOWN_TAGS),
    )


def decode_value(
    data: bytes | memoryview | None, place: RecordPlace | None = None
) -> TransactionLogValue | None:
    """The value of a ``__transaction_state`` record; ``None`` for a tombstone."""
    if data is None:
        return None
    return decoding(place or place_in_log(), "value", lambda: _read_value(MessageReader(data)))
