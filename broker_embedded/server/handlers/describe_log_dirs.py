"""DescribeLogDirs (API key 35), versions 1-4: this broker's log dir and the partitions in it,
as Kafka's ``ReplicaManager.describeLogDirs`` answers (what ``kafka-log-dirs --describe``
prints).

- One result: the log dir's absolute path, error NONE, and its topics, each with the
  partitions the request names (``topics`` null: every partition, internal topics included; a
  partition not hosted here is left out, as Kafka does): ``partition_size`` is the bytes of
  its segments, ``offset_lag`` 0 (Kafka's ``max(high watermark - log end offset, 0)`` for a
  current replica), ``is_future_key`` false (no replica moves between log dirs here).
- v4: ``total_bytes`` and ``usable_bytes`` of the log dir's file system.
- Authorization (with an authorizer): Describe on the Cluster, else (as Kafka) no results and,
  from v3, CLUSTER_AUTHORIZATION_FAILED (31) at the top level.

Reads the log manager's logs (a snapshot of its dict); thread-safe.
"""

from __future__ import annotations

import functools
import shutil
from collections import defaultdict
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.topic_partition import TopicPartition

API_KEY = 35
VERSIONS = (1, 4)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(describe_log_dirs_response, ctx))


def describe_log_dirs_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    refusal = ctx.cluster_refusal(request, AclOperation.DESCRIBE)
    if refusal is not None:
        return make(
            types.DescribeLogDirsResponse,
            throttle_time=timedelta(0),
            error_code=error_code(refusal),
            results=(),
        )
    result = _result(ctx, types, request.body)
    return make(
        types.DescribeLogDirsResponse,
        throttle_time=timedelta(0),
        error_code=error_code(None),
        results=(result,),
    )


def _result(ctx: ApiContext, types: ModuleType, body: Any) -> Any:
    log_manager = ctx.broker.log_manager
    logs = dict(log_manager.logs)
    wanted = (
        sorted(logs)
        if body.topics is None
        else [TopicPartition(t.topic, p) for t in body.topics for p in t.partitions]
    )
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp in wanted:
        lg = logs.get(tp)
        if lg is None or lg.is_closed:
            continue
        by_topic[tp.topic].append(
            make(
                types.DescribeLogDirsPartition,
                partition_index=tp.partition,
                partition_size=lg.size_in_bytes,
                offset_lag=0,
                is_future_key=False,
            )
        )
    topics = tuple(
        make(types.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )
    path = log_manager.log_dir.resolve()
    usage = shutil.disk_usage(path)
    return make(
        types.DescribeLogDirsResult,
        error_code=error_code(None),
        log_dir=str(path),
        topics=topics,
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
