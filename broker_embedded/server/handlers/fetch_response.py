"""Fetch responses encoded around their record bytes, so the records go from the segment file to
the socket with ``sendfile`` (zero-copy) and never into Python memory.

A Fetch response (API key 1, v4-v18) is laid out as (Kafka's FetchResponse.json; ``[]`` an array,
``?`` nullable; flexible versions, v12+, use compact lengths and end each struct with tagged
fields)::

    response header      correlation_id int32 (+ tagged fields, v12+: response header v1)
    FetchResponse        throttle_time_ms int32, error_code int16 (v7+), session_id int32 (v7+),
                         responses[] (+ tagged fields: node_endpoints, v16+)
    FetchableTopic       topic string (< v13) | topic_id uuid (v13+), partitions[] (+ tags)
    PartitionData        partition_index int32, error_code int16, high_watermark int64,
                         last_stable_offset int64, log_start_offset int64 (v5+),
                         aborted_transactions[]? (producer_id int64, first_offset int64),
                         preferred_read_replica int32 (v11+), records bytes?
                         (+ tags: diverging_epoch, current_leader, snapshot_id, v12+)

    array length   non-flexible: int32 n (-1 null);  flexible: unsigned varint n + 1 (0 null)
    bytes length   the same rule; the records field is nullable bytes

In every version the array or records field is the LAST field of its struct before the tagged
fields. So each level is encoded by kio from its schema with that last field empty (``()`` or
``b""``) and no tagged field set, and the encoding is cut around the empty field's length prefix
(``int32 0`` or varint ``1``), leaving a head and a tail (``b""``, or ``b"\\x00"``: no tagged
fields); the real length prefix and contents go in between. Everything but the lengths and the
record bytes is therefore kio's encoding; the test suite checks the whole frame byte for byte
against kio's encoding of the same response with the records as bytes, for every version.

Tagged fields (KIP-951, Fetch v16+, as Kafka's ``handleFetchRequest`` fills them): a partition
answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries ``current_leader`` (leader id and
epoch) and the response ``node_endpoints`` (the live leaders' id, host, port, rack). Their
encoding follows the last field, so with one set the tail is cut from kio's encoding of the
entity with the tag set, after the same head and empty length prefix.

Output: a list of parts (``bytes`` and :class:`FileRegion`) forming the frame after its size
prefix, for :meth:`KafkaApis.send_frame_parts`. A partition's records are a :class:`FileRegion`
(sent with ``sendfile``) or bytes. Pure functions: thread-safe.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from functools import cache
from typing import Any

from kio.static.primitive import i32, i64

from broker_embedded.error_code import ErrorCode
from broker_embedded.record.varint import encode_uvarint
from broker_embedded.server.handlers.api_context import Node
from broker_embedded.server.protocol import RequestHeader, encode_body, response_schema
from broker_embedded.server.request_channel import FileRegion, Part

FETCH_KEY = 1
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class PartitionResponse:
    """One partition of a Fetch response as it goes on the wire (-1: unknown offset)."""

    partition: int
    error_code: int = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    records: bytes | FileRegion = b""
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12+ tag 1

    @property
    def records_size(self) -> int:
        r = self.records
        return r.length if isinstance(r, FileRegion) else len(r)


@dataclass(frozen=True, slots=True)
class TopicResponse:
    """A topic's partitions: ``topic`` is the name (< v13) or the topic id (v13+)."""

    topic: str | uuid.UUID
    partitions: tuple[PartitionResponse, ...]


@cache
def _module(version: int) -> Any:
    """kio's module of the Fetch response classes of ``version``."""
    schema = response_schema(FETCH_KEY, version)
    if schema is None:
        raise ValueError(f"kio has no Fetch response v{version}")
    return sys.modules[schema.__module__]


@cache
def _classes(version: int) -> tuple[type, type, type, type, frozenset[str]]:
    """kio's FetchResponse, FetchableTopicResponse, PartitionData and AbortedTransaction of
    ``version``, and PartitionData's field names."""
    module = _module(version)
    part = module.PartitionData
    names = frozenset(f.name for f in fields(part))
    topic, aborted = module.FetchableTopicResponse, module.AbortedTransaction
    return module.FetchResponse, topic, part, aborted, names


def length_prefix(n: int | None, flexible: bool) -> bytes:
    """The length of an array or bytes field (``None``: null) in the version's encoding."""
    if not flexible:
        return _INT32.pack(-1 if n is None else n)
    return encode_uvarint(0 if n is None else n + 1)


def _split(entity: Any, flexible: bool, **tags: Any) -> tuple[bytes, bytes]:
    """kio's encoding of ``entity`` (its last field empty) cut around that field's length
    prefix: (head, tail); with ``tags``, the tail is that of ``entity`` with those tagged
    fields set (module docstring)."""
    encoded = encode_body(entity)
    empty = length_prefix(0, flexible)
    tail = b"\x00" if flexible else b""
    cut = len(encoded) - len(tail) - len(empty)
    if encoded[cut:] != empty + tail:
        raise ValueError(
            f"{type(entity).__qualname__} v{entity.__version__}: the encoding does not end with "
            "its empty last field (a tagged field set?)"
        )
    if tags:
        tagged = encode_body(dataclasses.replace(entity, **tags))
        assert tagged.startswith(encoded[: cut + len(empty)])
        tail = tagged[cut + len(empty) :]
    return encoded[:cut], tail


def _partition_parts(p: PartitionResponse, version: int, flexible: bool) -> list[Part]:
    _, _, part_cls, aborted_cls, names = _classes(version)
    aborted = None
    if p.aborted_transactions is not None:
        aborted = tuple(
            aborted_cls(producer_id=i64(pid), first_offset=i64(first))
            for pid, first in p.aborted_transactions
        )
    values: dict[str, Any] = {
        "partition_index": i32(p.partition),
        "error_code": ErrorCode(p.error_code),
        "high_watermark": i64(p.high_watermark),
        "last_stable_offset": i64(p.last_stable_offset),
        "log_start_offset": i64(p.log_start_offset),
        "aborted_transactions": aborted,
        "preferred_read_replica": i32(p.preferred_read_replica),
        "records": b"",
    }
    tags = {}
    if p.current_leader is not None and "current_leader" in names:
        leader_id, epoch = p.current_leader
        tags["current_leader"] = _module(version).LeaderIdAndEpoch(
            leader_id=i32(leader_id), leader_epoch=i32(epoch)
        )
    entity = part_cls(**{k: v for k, v in values.items() if k in names})
    head, tail = _split(entity, flexible, **tags)
    return [head, length_prefix(p.records_size, flexible), p.records, tail]


def fetch_response_parts(
    header: RequestHeader,
    topics: Sequence[TopicResponse],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[Node] = (),
) -> list[Part]:
    """The frame (after its size prefix) of the Fetch response to ``header``'s request;
    ``node_endpoints`` go out from v16 on."""
    version = header.api_version
    response_cls, topic_cls, _, _, _ = _classes(version)
    flexible = bool(response_cls.__flexible__)
    top: dict[str, Any] = {
        "throttle_time": timedelta(milliseconds=throttle_time_ms),
        "error_code": ErrorCode(error_code),
        "session_id": i32(session_id),
        "responses": (),
    }
    names = {f.name for f in fields(response_cls)}
    tags = {}
    if node_endpoints and "node_endpoints" in names:
        tags["node_endpoints"] = _node_endpoints(version, node_endpoints)
    entity = response_cls(**{k: v for k, v in top.items() if k in names})
    head, tail = _split(entity, flexible, **tags)
    out = io.BytesIO()
    out.write(_INT32.pack(header.correlation_id))
    if header.response_header_version == 1:
        out.write(b"\x00")
    out.write(head)
    out.write(length_prefix(len(topics), flexible))
    parts: list[Part] = []
    topic_field = "topic_id" if version >= 13 else "topic"
    for t in topics:
        t_head, t_tail = _split(topic_cls(**{topic_field: t.topic, "partitions": ()}), flexible)
        out.write(t_head)
        out.write(length_prefix(len(t.partitions), flexible))
        for p in t.partitions:
            for piece in _partition_parts(p, version, flexible):
                if isinstance(piece, FileRegion):
                    parts += (out.getvalue(), piece)
                    out = io.BytesIO()
                else:
                    out.write(piece)
        out.write(t_tail)
    out.write(tail)
    parts.append(out.getvalue())
    return parts


def _node_endpoints(version: int, nodes: Sequence[Node]) -> tuple[Any, ...]:
    entry = _module(version).NodeEndpoint
    return tuple(
        entry(node_id=i32(n.node_id), host=n.host, port=i32(n.port), rack=n.rack) for n in nodes
    )


def group_by_topic(
    partitions: Sequence[tuple[str | uuid.UUID, PartitionResponse]],
) -> list[TopicResponse]:
    """Consecutive partitions of the same topic in one topic entry, in order (as Kafka's
    ``FetchResponse.of`` builds them)."""
    topics: list[TopicResponse] = []
    run: list[PartitionResponse] = []
    current: str | uuid.UUID | None = None
    for topic, p in partitions:
        if run and topic != current:
            topics.append(TopicResponse(current, tuple(run)))  # type: ignore[arg-type]
            run = []
        current = topic
        run.append(p)
    if run:
        topics.append(TopicResponse(current, tuple(run)))  # type: ignore[arg-type]
    return topics


__all__ = [
    "PartitionResponse",
    "TopicResponse",
    "fetch_response_parts",
    "group_by_topic",
    "length_prefix",
]
