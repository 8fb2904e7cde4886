"""Helpers of the Fetch API tests: a broker served on 127.0.0.1 with the Fetch handler, kio Fetch
requests of any version, and decoding of the responses with kio (records as bytes)."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i64

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers.fetch import FetchApi, register
from broker_embedded.server.protocol import request_schema, response_schema
from tests.broker_embedded.server._net import config, serve

# (partition, fetch offset, partition max bytes, current leader epoch)
Part = tuple[int, int, int, int]


@contextlib.contextmanager
def fetch_server(broker: Broker, **options: Any) -> Iterator[tuple[BrokerServer, FetchApi]]:
    """The broker's Fetch API on an OS-chosen port; ``options``: ``io_threads`` and FetchApi's."""
    io_threads = options.pop("io_threads", 2)
    apis: list[FetchApi] = []
    cfg = config(num_io_threads=io_threads)
    with serve(cfg, lambda a: apis.append(register(a, broker, **options))) as server:
        yield server, apis[0]


def make(cls: type, **values: Any) -> Any:
    """A kio entity from the values its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def fetch_request(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[Part]]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    isolation: int = 0,
    session_id: int = 0,
    epoch: int = -1,
    forgotten: Sequence[tuple[str | uuid.UUID, Sequence[int]]] = (),
    replica_id: int = -1,
) -> Any:
    schema = request_schema(1, version)
    m = sys.modules[schema.__module__]
    tf = "topic_id" if version >= 13 else "topic"
    fetch_topics = tuple(
        make(
            m.FetchTopic,
            **{tf: t},
            partitions=tuple(
                make(
                    m.FetchPartition,
                    partition=i32(p),
                    fetch_offset=i64(o),
                    partition_max_bytes=i32(mb),
                    current_leader_epoch=i32(e),
                )
                for p, o, mb, e in parts
            ),
        )
        for t, parts in topics
    )
    forgotten_topics = tuple(
        make(m.ForgottenTopic, **{tf: t}, partitions=tuple(i32(p) for p in ps))
        for t, ps in forgotten
    )
    extra = {}
    if version >= 15:
        extra["replica_state"] = m.ReplicaState(replica_id=i32(replica_id))
    return make(
        schema,
        replica_id=i32(replica_id),
        max_wait=timedelta(milliseconds=max_wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(isolation),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=fetch_topics,
        forgotten_topics_data=forgotten_topics,
        rack_id="",
        **extra,
    )


def decode(version: int, frame: bytes, correlation_id: int = 1) -> Any:
    """The kio FetchResponse of a response frame (after its size), checking the header."""
    schema = response_schema(1, version)
    (cid,) = struct.unpack_from(">i", frame)
    assert cid == correlation_id
    offset = 4
    if schema.__flexible__:
        assert frame[4] == 0  # no tagged fields in the response header
        offset = 5
    message, size = entity_reader(schema)(memoryview(frame), offset)
    assert offset + size == len(frame)
    return message


def partition_data(
    version: int,
    partition: int,
    *,
    error: int = 0,
    hw: int = -1,
    lso: int = -1,
    log_start: int = -1,
    aborted: tuple[tuple[int, int], ...] | None = None,
    records: bytes = b"",
) -> Any:
    m = sys.modules[response_schema(1, version).__module__]
    txns = None
    if aborted is not None:
        txns = tuple(
            m.AbortedTransaction(producer_id=i64(p), first_offset=i64(f)) for p, f in aborted
        )
    return make(
        m.PartitionData,
        partition_index=i32(partition),
        error_code=ErrorCode(error),
        high_watermark=i64(hw),
        last_stable_offset=i64(lso),
        log_start_offset=i64(log_start),
        aborted_transactions=txns,
        preferred_read_replica=i32(-1),
        records=records,
    )


def expected(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[Any]]],
    *,
    error: int = 0,
    session_id: int = 0,
) -> Any:
    schema = response_schema(1, version)
    m = sys.modules[schema.__module__]
    tf = "topic_id" if version >= 13 else "topic"
    responses = tuple(m.FetchableTopicResponse(**{tf: t}, partitions=tuple(ps)) for t, ps in topics)
    return make(
        schema,
        throttle_time=timedelta(0),
        error_code=ErrorCode(error),
        session_id=i32(session_id),
        responses=responses,
    )
