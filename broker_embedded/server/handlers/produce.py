"""Produce (API key 0), versions 3-13: record batches appended as they arrived.

The ``records`` field of each partition (kio hands it over as one ``bytes`` slice of the frame)
goes to the partition log's append validation untouched: no record is decoded here. Before
that, the request-level checks of Kafka's ``ProduceRequest.validateRecords`` read three header
fields of the batch (v2 layout: base offset int64 @0, batch length int32 @8, magic int8 @16,
attributes int16 @21, codec = attributes & 7):
- exactly one whole batch (its length + 12 is the field's size) of magic 2, else INVALID_RECORD
  (87) for that partition (null records too);
- zstd (codec 4) before v7: UNSUPPORTED_COMPRESSION_TYPE (76).
The log then checks CRC (CORRUPT_MESSAGE, 2), ``max.message.bytes`` (MESSAGE_TOO_LARGE, 10),
record counts and control batches (INVALID_RECORD), producer epochs and sequences
(OUT_OF_ORDER_SEQUENCE_NUMBER 45, INVALID_PRODUCER_EPOCH 47; a retried duplicate is answered
with its original offsets and no error, as Kafka does). Unknown topic or partition: 3;
a partition this broker does not lead: NOT_LEADER_OR_FOLLOWER (6); acks=all with the ISR
below ``min.insync.replicas``: NOT_ENOUGH_REPLICAS (19). v13 names topics by id: an unknown id
is UNKNOWN_TOPIC_ID (100). A write the log dir cannot take (a full disk) is KAFKA_STORAGE_ERROR
(56) with nothing appended; clients retry it, and it succeeds once space is back
(storage/log_appender.py).

acks: 0, 1 or -1 (all); anything else answers INVALID_REQUIRED_ACKS (21) for every partition.
acks=all waits in the replica manager's produce purgatory (``timeout`` ms, then
REQUEST_TIMED_OUT, 7): the handler thread returns at once and the purgatory's completion sends
the response. acks=0 sends no response; if any partition failed the connection is closed
instead, as Kafka does, so the client learns it by the disconnect.

Authorization (with an authorizer configured, ``security/authorizer.py``): transactional records
need Write on the TransactionalId (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53, for every
partition), each topic Write (else TOPIC_AUTHORIZATION_FAILED, 29, for its partitions); a
refused partition writes nothing, the others are appended.

Transactional produce (v3+ ``transactional_id``): the batches' producer id and epoch are
checked by the partition's producer state; a batch that would open its producer's transaction
at a partition is first verified with the transaction coordinator, as Kafka 3.9 does by default
(KIP-890 part 1, ``TransactionCoordinator.verify``): a fenced epoch is INVALID_PRODUCER_EPOCH
(47) and a partition not added to the transaction INVALID_TXN_STATE (48), nothing appended, so
a zombie producer cannot leave a hanging transaction.

Response per partition: error code, base offset (-1 on error), log append time (v2+: the
broker time on LogAppendTime topics, else -1), log start offset (v5+), record errors and error
message (v8+). As Kafka's ``ReplicaManager`` answers a ``RecordValidationException``: when the
log's validation rejects records one by one (a keyless record on a compacted topic:
INVALID_RECORD, 87), ``record_errors`` lists them (``batch_index``: the record's index in its
batch, ``batch_index_error_message``: Kafka's text, e.g. "Compacted topic cannot accept message
without key in topic partition t-0"; at most ``MAX_RECORD_ERRORS``, errors.py) and
``error_message`` is Kafka's summary ("One or more records have been rejected due to N record
errors in total, and only showing the first three errors at most: [RecordError(batchIndex=0,
message='...')]"). Any other error (a CRC mismatch: CORRUPT_MESSAGE, 2; a batch-level
INVALID_RECORD, ...) has no record errors; where Kafka sends a null error message, this broker
sends its own, which names the topic, partition and why.

NOT_LEADER_OR_FOLLOWER (v10+, KIP-951, as Kafka's ``handleProduceRequest``): the partition's
``current_leader`` (leader id and epoch from the controller, -1 when unknown) and, in the
response's ``node_endpoints``, the node (id, host, port, rack) of each such leader that is live,
so the client redirects without a Metadata round trip.

Thread safety: a response is built by whichever thread completes the append (the handler, or
for acks=all the thread that completes the delayed produce) from values no one else changes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from broker_embedded.broker import topic_partition
from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.errors import (
    InvalidRecordError,
    InvalidRequiredAcksError,
    KafkaApiError,
    NotLeaderOrFollowerError,
    RecordValidationError,
    UnknownTopicIdError,
    UnsupportedCompressionTypeError,
)
from broker_embedded.protocol.schemas import encode_body, types_of
from broker_embedded.record.batch_layout import PRODUCER_ID_OFFSET, TRANSACTIONAL_MASK
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.handlers.metadata import LeaderNode, current_leader, node_endpoints
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.protocol import response_schema
from broker_embedded.server.request_channel import Request, Response
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.topic_partition import TopicPartition

API_KEY = 0
VERSIONS = (3, 13)
FIRST_ZSTD_VERSION = 7
FIRST_CURRENT_LEADER_VERSION = 10  # KIP-951
_LENGTH = struct.Struct(">i")
_MAGIC_AT = 16
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")  # producer id, producer epoch
_ATTRIBUTES_AT = 21
_V2_HEADER_SIZE = 61
_ZSTD = 4
WRITE = AclOperation.WRITE

# A partition of the request: its topic partition (appended) or the error it is answered with.
Slot = TopicPartition | KafkaApiError
# The request's topics in order: (name, topic id, [(partition index, slot)]).
Layout = list[tuple[str | None, Any, list[tuple[int, Slot]]]]


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    def handle(request: Request) -> None:
        handle_produce(apis, ctx, request)

    apis.register(API_KEY, *VERSIONS, handle)


def handle_produce(apis: KafkaApis, ctx: ApiContext, request: Request) -> None:
    body, version = request.body, request.header.api_version
    acks = body.acks
    refusal = None if ctx.authorizer is None else _refusal(ctx, request)
    layout, entries = _layout(ctx, body, version, acks, refusal)
    txn_id = getattr(body, "transactional_id", None)
    if txn_id is not None:
        _verify_transactions(ctx, txn_id, layout, entries)

    def respond(results: Mapping[TopicPartition, ProduceResult]) -> None:
        _answer(apis, ctx, request, acks, layout, results)

    if acks not in (0, 1, -1) or not entries:
        respond({})
        return
    timeout_ms = max(0, int(body.timeout / timedelta(milliseconds=1)))
    ctx.broker.replica_manager.append_records_async(
        entries, respond, required_acks=acks, timeout_ms=timeout_ms
    )


def _verify_transactions(
    ctx: ApiContext, txn_id: str, layout: Layout, entries: dict[TopicPartition, bytes]
) -> None:
    """The transaction coordinator's check of each transactional batch that would open its
    producer's transaction at a partition (module docstring): a refused partition leaves
    ``entries`` and its slot in ``layout`` becomes the error."""
    coordinator = ctx.broker.controller.transaction_coordinator
    refused: dict[TopicPartition, KafkaApiError] = {}
    for tp, records in entries.items():
        if not _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_AT)[0] & TRANSACTIONAL_MASK:
            continue
        producer_id, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID_OFFSET)
        if ctx.broker.replica_manager.has_ongoing_txn(tp, producer_id, epoch):
            continue
        try:
            coordinator.verify(txn_id, producer_id, epoch, tp)
        except KafkaApiError as e:
            refused[tp] = e
    for tp in refused:
        del entries[tp]
    if refused:
        layout[:] = [
            (
                name,
                topic_id,
                [(i, refused.get(s, s) if isinstance(s, TopicPartition) else s) for i, s in slots],
            )
            for name, topic_id, slots in layout
        ]


def _refusal(ctx: ApiContext, request: Request) -> Callable[[str], KafkaApiError | None]:
    """The authorization error of writing to a topic (None: allowed): Write on the
    TransactionalId for transactional records, then Write on the topic, as Kafka's
    ``handleProduceRequest`` checks."""
    txn_id = getattr(request.body, "transactional_id", None)
    error = None if txn_id is None else ctx.txn_refusal(request, txn_id)
    if error is not None:
        return lambda _name: error

    return lambda name: ctx.topic_refusal(request, WRITE, name)


def _layout(
    ctx: ApiContext,
    body: Any,
    version: int,
    acks: int,
    refusal: Callable[[str], KafkaApiError | None] | None = None,
) -> tuple[Layout, dict[TopicPartition, bytes]]:
    """Each partition's slot, and the records of those that go to the log (none of a topic
    ``refusal`` refuses)."""
    names = ctx.topic_names_by_id() if version >= 13 else {}
    bad_acks = (
        None
        if acks in (0, 1, -1)
        else InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), not {acks}")
    )
    layout: Layout = []
    entries: dict[TopicPartition, bytes] = {}
    for topic in body.topic_data:
        topic_id = getattr(topic, "topic_id", None)
        name = names.get(topic_id) if version >= 13 else topic.name
        slots: list[tuple[int, Slot]] = []
        denied = refusal(name) if refusal is not None and name is not None else None
        for data in topic.partition_data:
            slot = bad_acks or denied or _slot(name, topic_id, data.index, data.records, version)
            if isinstance(slot, TopicPartition):
                entries[slot] = data.records
            slots.append((data.index, slot))
        layout.append((name, topic_id, slots))
    return layout, entries


def _slot(name: str | None, topic_id: Any, index: int, records: bytes | None, version: int) -> Slot:
    if name is None:
        return UnknownTopicIdError(f"no topic has id {topic_id} (partition {index})")
    try:
        tp = topic_partition(name, index)
    except KafkaApiError as e:
        return e
    error = check_records(tp, records, version)
    return tp if error is None else error


def check_records(tp: TopicPartition, records: bytes | None, version: int) -> KafkaApiError | None:
    """Kafka's request-level checks of a partition's records (module docstring)."""
    where = f"topic {tp.topic!r} partition {tp.partition}"
    if records is None or len(records) < _V2_HEADER_SIZE:
        size = "null" if records is None else f"{len(records)} bytes"
        return InvalidRecordError(f"{where}: records ({size}) hold no whole record batch")
    size = _LENGTH.unpack_from(records, 8)[0] + 12
    if size != len(records):
        return InvalidRecordError(
            f"{where}: Produce v3+ must carry exactly one record batch per partition; the first "
            f"batch is {size} bytes of the {len(records)} sent"
        )
    if records[_MAGIC_AT] != 2:
        return InvalidRecordError(
            f"{where}: Produce v3+ batches must have magic 2, not {records[_MAGIC_AT]}"
        )
    codec = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_AT)[0] & 7
    if codec == _ZSTD and version < FIRST_ZSTD_VERSION:
        return UnsupportedCompressionTypeError(
            f"{where}: zstd batches need Produce v{FIRST_ZSTD_VERSION}+, this request is v{version}"
        )
    return None


def _answer(
    apis: KafkaApis,
    ctx: ApiContext,
    request: Request,
    acks: int,
    layout: Layout,
    results: Mapping[TopicPartition, ProduceResult],
) -> None:
    if acks == 0:
        failed = _first_error(layout, results)
        if failed is None:
            apis.send_no_response(request)
        else:  # Kafka closes an acks=0 producer's connection so that it notices
            reason = f"acks=0 produce failed: {failed.name}: {failed}"
            apis.channel.send_response(
                Response(request, close_connection=True, close_reason=reason)
            )
        return
    fast = _success_body(request.header.api_version, layout, results)
    if fast is not None:
        apis.send_body(request, fast)
        return
    types = response_types(request)
    leaders: list[LeaderNode] = []
    kip951 = request.header.api_version >= FIRST_CURRENT_LEADER_VERSION
    topics = tuple(
        make(
            types.TopicProduceResponse,
            name=name,
            topic_id=topic_id,
            partition_responses=tuple(
                _partition(types, i, s, results, _leader(ctx, name, i, s, results, leaders, kip951))
                for i, s in slots
            ),
        )
        for name, topic_id, slots in layout
    )
    apis.send_response(
        request,
        make(
            types.ProduceResponse,
            responses=topics,
            throttle_time=timedelta(0),
            node_endpoints=node_endpoints(types, leaders),
        ),
    )


# -- the all-success response from a template ---------------------------------------------------

# Sentinels of the template's base offset and log start offset of partition i (+ i). Their bytes
# hold '[' and '<' (0x5B, 0x3C), which no topic name may contain, so each occurs in the encoding
# exactly where its field is (checked when the template is made).
_BASE_SENTINEL, _START_SENTINEL = 0x7A5B3C1D00000000, 0x7A5C3C1E00000000
_INT64 = struct.Struct(">q")
TEMPLATES = 1024  # response shapes (version, topics, partitions) kept
FIRST_LOG_START_OFFSET_VERSION = 5


@dataclass(frozen=True, slots=True)
class _Template:
    body: bytes
    positions: tuple[tuple[int, int], ...]  # per partition: base offset @, log start offset @


def _success_body(
    version: int, layout: Layout, results: Mapping[TopicPartition, ProduceResult]
) -> bytes | None:
    """The response body when every partition succeeded without a log append time (the
    common case): kio's encoding of that response shape, made once (:func:`_template`), with
    the offsets written in; None otherwise (the response is then built whole by kio)."""
    shape, offsets = [], []
    for name, topic_id, slots in layout:
        indexes = []
        for index, slot in slots:
            r = results.get(slot) if isinstance(slot, TopicPartition) else None
            if r is None or r.error is not None or r.log_append_time >= 0:
                return None
            indexes.append(index)
            offsets.append((r.base_offset, r.log_start_offset))
        shape.append((name, topic_id, tuple(indexes)))
    template = _template(version, tuple(shape))
    if template is None:
        return None
    body = bytearray(template.body)
    for (base_at, start_at), (base, start) in zip(template.positions, offsets, strict=True):
        _INT64.pack_into(body, base_at, base)
        if start_at >= 0:
            _INT64.pack_into(body, start_at, start)
    return bytes(body)


@functools.lru_cache(maxsize=TEMPLATES)
def _template(
    version: int, shape: tuple[tuple[Any, Any, tuple[int, ...]], ...]
) -> _Template | None:
    """The encoded all-success response of a shape, with sentinel offsets, and where they are
    (None when a sentinel is not found exactly once: no template for that shape)."""
    types = types_of(response_schema(API_KEY, version))
    count = 0
    topics = []
    for name, topic_id, indexes in shape:
        parts = []
        for index in indexes:
            parts.append(
                make(
                    types.PartitionProduceResponse,
                    index=index,
                    error_code=error_code(None),
                    base_offset=_BASE_SENTINEL + count,
                    log_append_time=None,
                    log_start_offset=_START_SENTINEL + count,
                    record_errors=(),
                    error_message=None,
                )
            )
            count += 1
        topics.append(
            make(
                types.TopicProduceResponse,
                name=name,
                topic_id=topic_id,
                partition_responses=tuple(parts),
            )
        )
    body = encode_body(
        make(
            types.ProduceResponse,
            responses=tuple(topics),
            throttle_time=timedelta(0),
            node_endpoints=(),
        )
    )
    positions = []
    has_start = version >= FIRST_LOG_START_OFFSET_VERSION
    for i in range(count):
        base, start = (_INT64.pack(s + i) for s in (_BASE_SENTINEL, _START_SENTINEL))
        if body.count(base) != 1 or body.count(start) != has_start:
            return None
        positions.append((body.find(base), body.find(start)))  # -1: no log start offset
    return _Template(body, tuple(positions))


def _leader(
    ctx: ApiContext,
    name: str | None,
    index: int,
    slot: Slot,
    results: Mapping[TopicPartition, ProduceResult],
    leaders: list[LeaderNode],
    kip951: bool,
) -> LeaderNode | None:
    """KIP-951 (v10+): the current leader of a partition answered NOT_LEADER_OR_FOLLOWER,
    also kept in ``leaders`` for the response's ``node_endpoints``; None otherwise."""
    error = results[slot].error if isinstance(slot, TopicPartition) else slot
    if not kip951 or name is None or not isinstance(error, NotLeaderOrFollowerError):
        return None
    leader = current_leader(ctx, name, index)
    leaders.append(leader)
    return leader


def _first_error(
    layout: Layout, results: Mapping[TopicPartition, ProduceResult]
) -> KafkaApiError | None:
    for _, _, slots in layout:
        for _, slot in slots:
            error = slot if isinstance(slot, KafkaApiError) else results[slot].error
            if error is not None:
                return error
    return None


def _partition(
    types: ModuleType,
    index: int,
    slot: Slot,
    results: Mapping[TopicPartition, ProduceResult],
    leader: LeaderNode | None,
) -> Any:
    r = results[slot] if isinstance(slot, TopicPartition) else None
    error = slot if r is None else r.error
    extra = {}
    if leader is not None:
        extra["current_leader"] = make(
            types.LeaderIdAndEpoch, leader_id=leader.leader_id, leader_epoch=leader.leader_epoch
        )
    return make(
        types.PartitionProduceResponse,
        index=index,
        error_code=error_code(error),
        base_offset=-1 if r is None else r.base_offset,
        log_append_time=None if r is None else _timestamp(r.log_append_time),
        log_start_offset=-1 if r is None else r.log_start_offset,
        record_errors=_record_errors(types, error),
        error_message=error.summary
        if isinstance(error, RecordValidationError)
        else error_message(error),
        **extra,
    )


def _record_errors(types: ModuleType, error: KafkaApiError | None) -> tuple[Any, ...]:
    """Kafka's ``record_errors`` (v8+): the rejected records of the batch by index, each with
    its message; none for an error about the whole batch or request."""
    entry = getattr(types, "BatchIndexAndErrorMessage", None)  # v8+
    if entry is None or not isinstance(error, RecordValidationError):
        return ()
    return tuple(
        make(entry, batch_index=i, batch_index_error_message=m) for i, m in error.record_errors
    )


def _timestamp(ms: int) -> datetime | None:
    """A log append time as kio's datetime (None for -1), exact to the millisecond."""
    if ms < 0:
        return None
    return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
