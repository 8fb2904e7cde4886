"""AlterConfigs (API key 33, versions 0-2) and IncrementalAlterConfigs (44, versions 0-1): a
topic's config overrides changed, persisted in the log dir's ``kafkalog-topics.json`` (and a
cluster's controller state) and taken by the topic's logs at once (retention, compaction,
``max.message.bytes``, rolls: ``UnifiedLog.update_config``).

- AlterConfigs replaces a topic's overrides with the request's (a config left out goes back to
  its default); IncrementalAlterConfigs changes them one operation each (Kafka's
  ``AlterConfigOp.OpType``): SET 0, DELETE 1 (an absent name is no error), APPEND 2 and
  SUBTRACT 3 (LIST configs only, cleanup.policy here: the override, else the default, with the
  values added or removed).
- Checks in Kafka's order and words (``ConfigAdminManager.preprocess``, ``ConfigDef``):
  a resource named twice: INVALID_REQUEST (42) "Each resource must appear at most once." for
  both; a config named twice in a resource: INVALID_REQUEST "Error due to duplicate config
  keys"; a null value outside DELETE: INVALID_REQUEST "Null value not supported for : a, b";
  APPEND or SUBTRACT on a config that is no LIST: INVALID_CONFIG (40) "Can't APPEND to key
  retention.ms because its type is not LIST."; an unknown name: INVALID_CONFIG "Unknown topic
  config name: x"; a value of the wrong type or out of Kafka's range: INVALID_CONFIG "Invalid
  value x for configuration retention.ms: Not a number of type LONG" (or "Value must be at
  least -1", "String must be one of: compact, delete", "Expected value to be either true or
  false"). A topic config Kafka has and kafkalog does not serve (e.g. ``segment.jitter.ms``):
  INVALID_CONFIG "Topic config segment.jitter.ms is not supported by kafkalog". A value Kafka
  accepts and kafkalog's own bounds refuse (``segment.index.bytes`` under 8): INVALID_CONFIG
  with kafkalog's reason. An unknown topic: UNKNOWN_TOPIC_OR_PARTITION (3) "The topic 'x' does
  not exist."; an illegal name INVALID_TOPIC_EXCEPTION (17).
- ``validate_only``: every check, nothing changed.
- BROKER (4) resources: this broker's configs are static (its config file), so altering one
  is INVALID_REQUEST naming them (Kafka changes its dynamic broker configs); another broker
  id is INVALID_REQUEST as in DescribeConfigs. Other resource types: INVALID_REQUEST.
- Authorization (with an authorizer): AlterConfigs on the topic (TOPIC_AUTHORIZATION_FAILED,
  29) or on the Cluster for BROKER (CLUSTER_AUTHORIZATION_FAILED, 31).

Immutable tables and pure functions; the change itself is made under the controller's lock.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from broker_embedded.errors import (
    InvalidRequestError,
    KafkaApiError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.handlers.describe_configs import (
    BOOLEAN,
    BROKER,
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    TOPIC,
    TOPIC_CONFIGS,
    broker_configs,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.log_config import (
    InvalidConfigError,
    LogConfig,
    parse_boolean,
    parse_overrides,
)
from broker_embedded.storage.topic_partition import validate_topic

ALTER_KEY, ALTER_VERSIONS = 33, (0, 2)
INCREMENTAL_KEY, INCREMENTAL_VERSIONS = 44, (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATION_NAMES = MappingProxyType(
    {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
)
TYPE_NAMES = MappingProxyType({INT: "INT", LONG: "LONG", DOUBLE: "DOUBLE"})
NUMBER_BOUNDS = MappingProxyType({INT: (-(2**31), 2**31 - 1), LONG: (-(2**63), 2**63 - 1)})
INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class KafkaBounds:
    """Kafka's validator of a topic config (``ConfigDef``): a range, or the allowed strings."""

    at_least: float | None = None
    at_most: float | None = None
    one_of: tuple[str, ...] = ()


# Kafka 3.9's LogConfig validators of the topic configs kafkalog serves
KAFKA_BOUNDS: Mapping[str, KafkaBounds] = MappingProxyType(
    {
        "cleanup.policy": KafkaBounds(one_of=("compact", "delete")),
        "segment.bytes": KafkaBounds(at_least=14),
        "segment.ms": KafkaBounds(at_least=1),
        "segment.index.bytes": KafkaBounds(at_least=4),
        "index.interval.bytes": KafkaBounds(at_least=0),
        "retention.ms": KafkaBounds(at_least=-1),
        "retention.bytes": KafkaBounds(),
        "max.message.bytes": KafkaBounds(at_least=0),
        "message.timestamp.type": KafkaBounds(one_of=("CreateTime", "LogAppendTime")),
        "min.insync.replicas": KafkaBounds(at_least=1),
        "flush.messages": KafkaBounds(at_least=1),
        "flush.ms": KafkaBounds(at_least=0),
        "delete.retention.ms": KafkaBounds(at_least=0),
        "min.compaction.lag.ms": KafkaBounds(at_least=0),
        "max.compaction.lag.ms": KafkaBounds(at_least=1),
        "min.cleanable.dirty.ratio": KafkaBounds(at_least=0, at_most=1),
        "compression.type": KafkaBounds(
            one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
        ),
        "file.delete.delay.ms": KafkaBounds(at_least=0),
        "unclean.leader.election.enable": KafkaBounds(),
        "remote.storage.enable": KafkaBounds(),
        "local.retention.ms": KafkaBounds(at_least=-2),
        "local.retention.bytes": KafkaBounds(at_least=-2),
        "remote.log.copy.disable": KafkaBounds(),
        "remote.log.delete.on.disable": KafkaBounds(),
    }
)

# Kafka 3.9's other topic configs (throttles, codecs' levels, ...)
KAFKA_ONLY_TOPIC_CONFIGS = frozenset(
    {
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "preallocate",
        "segment.jitter.ms",
    }
)


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One requested change: a name, an operation (SET for AlterConfigs) and a value."""

    name: str
    operation: int
    value: str | None


Apply = Callable[[Mapping[str, str], Sequence[ConfigOp]], dict[str, str]]


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(
        ALTER_KEY, *ALTER_VERSIONS, functools.partial(_respond, ctx, _replace_all, False)
    )
    apis.register_responder(
        INCREMENTAL_KEY, *INCREMENTAL_VERSIONS, functools.partial(_respond, ctx, _incremental, True)
    )


def _respond(ctx: ApiContext, apply: Apply, incremental: bool, request: Request) -> Any:
    types, body = response_types(request), request.body
    keys = [(r.resource_type, r.resource_name) for r in body.resources]
    results = []
    for resource, key in zip(body.resources, keys, strict=True):
        ops = tuple(
            ConfigOp(c.name, c.config_operation if incremental else SET, c.value)
            for c in resource.configs
        )
        try:
            if keys.count(key) > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            _check_shape(ops)
            _refuse_unauthorized(ctx, request, *key)
            _alter(ctx, *key, ops, apply, body.validate_only)
            error = None
        except (KafkaApiError, InvalidConfigError) as e:
            error = e
        results.append(
            make(
                types.AlterConfigsResourceResponse,
                error_code=error_code(error),
                error_message=error_message(error),
                resource_type=key[0],
                resource_name=key[1],
            )
        )
    response = (
        types.AlterConfigsResponse if not incremental else types.IncrementalAlterConfigsResponse
    )
    return make(response, throttle_time=timedelta(0), responses=tuple(results))


def _check_shape(ops: Sequence[ConfigOp]) -> None:
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [op.name for op in ops if op.value is None and op.operation != DELETE]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
    for op in ops:
        if op.operation not in OPERATION_NAMES:
            raise InvalidRequestError(
                f"Unknown alter config operation {op.operation} for {op.name}"
            )


def _refuse_unauthorized(ctx: ApiContext, request: Request, rtype: int, name: str) -> None:
    op = AclOperation.ALTER_CONFIGS
    refusal = (
        ctx.topic_refusal(request, op, name)
        if rtype == TOPIC
        else ctx.cluster_refusal(request, op)
        if rtype == BROKER
        else None
    )
    if refusal is not None:
        raise refusal


def _alter(
    ctx: ApiContext,
    rtype: int,
    name: str,
    ops: Sequence[ConfigOp],
    apply: Apply,
    validate_only: bool,
) -> None:
    if rtype == BROKER:
        broker_configs(ctx, name)  # another broker's id: INVALID_REQUEST
        raise InvalidRequestError(
            "kafkalog's broker configs are static (its config file): cannot update "
            f"{', '.join(op.name for op in ops) or 'nothing'} dynamically"
        )
    if rtype != TOPIC:
        raise InvalidRequestError(f"AlterConfigs: unsupported resource type {rtype}")
    validate_topic(name)
    if name not in ctx.broker.list_topics():
        raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
    current = ctx.broker.describe_topic(name).config
    overrides = apply(current, ops)
    for key, value in overrides.items():
        check_kafka_value(key, value)
    ctx.broker.alter_topic_config(name, overrides, validate_only=validate_only)


def _replace_all(_current: Mapping[str, str], ops: Sequence[ConfigOp]) -> dict[str, str]:
    """AlterConfigs: the request's configs are the topic's overrides."""
    return {op.name: op.value for op in ops if op.value is not None}


def _incremental(current: Mapping[str, str], ops: Sequence[ConfigOp]) -> dict[str, str]:
    """IncrementalAlterConfigs: ``current`` with each operation applied."""
    out = dict(current)
    for op in ops:
        if op.operation == DELETE:
            out.pop(op.name, None)
        elif op.operation == SET:
            out[op.name] = op.value or ""
        else:
            out[op.name] = _list_op(out, op)
    return out


def _list_op(overrides: Mapping[str, str], op: ConfigOp) -> str:
    key = TOPIC_CONFIGS.get(op.name)
    if key is None or key.config_type != LIST:
        raise InvalidConfigError(
            f"Can't {OPERATION_NAMES[op.operation]} to key {op.name} because its type is not LIST."
        )
    old = overrides.get(op.name, LogConfig().to_properties()[op.name])
    values = _parts(old)
    given = _parts(op.value or "")
    if op.operation == APPEND:
        return ",".join(values + [v for v in given if v not in values])
    return ",".join(v for v in values if v not in given)


def _parts(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def check_kafka_value(name: str, value: str) -> None:
    """Raise :class:`InvalidConfigError` in Kafka's words when Kafka refuses ``value`` for
    topic config ``name``; then kafkalog's own check (module docstring)."""
    key = TOPIC_CONFIGS.get(name)
    if key is None:
        if name in KAFKA_ONLY_TOPIC_CONFIGS:
            raise InvalidConfigError(f"Topic config {name} is not supported by kafkalog")
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    reason = _kafka_refusal(key.config_type, KAFKA_BOUNDS[name], value)
    if reason is not None:
        raise InvalidConfigError(f"Invalid value {reason[0]} for configuration {name}: {reason[1]}")
    parse_overrides({name: value})


def _kafka_refusal(config_type: int, bounds: KafkaBounds, value: str) -> tuple[str, str] | None:
    """(the value as Kafka prints it, Kafka's reason), or None when Kafka accepts it."""
    text = value.strip()
    if config_type == BOOLEAN:
        ok = parse_boolean(text) is not None
        return None if ok else (value, "Expected value to be either true or false")
    if config_type in (STRING, LIST):
        items = _parts(text) if config_type == LIST else [text]
        bad = [v for v in items if bounds.one_of and v not in bounds.one_of]
        return (value, f"String must be one of: {', '.join(bounds.one_of)}") if bad else None
    number: float
    if config_type == DOUBLE:
        try:
            number = float(text)
        except ValueError:
            return value, "Not a number of type DOUBLE"
        shown = java_double(number)
    else:
        lo, hi = NUMBER_BOUNDS[config_type]
        if not INTEGER.fullmatch(text) or not lo <= int(text) <= hi:
            return value, f"Not a number of type {TYPE_NAMES[config_type]}"
        number, shown = int(text), value
    if bounds.at_least is not None and number < bounds.at_least:
        return shown, f"Value must be at least {_bound(bounds.at_least)}"
    if bounds.at_most is not None and number > bounds.at_most:
        return shown, f"Value must be no more than {_bound(bounds.at_most)}"
    return None


def _bound(n: float) -> str:
    return str(int(n)) if n == int(n) else str(n)


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` prints it (-5.0, 1.5, 1.0E20)."""
    if x != x or x in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(x)]
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        text = repr(x)
        return text if "e" not in text else f"{Decimal(text):f}"
    d = Decimal(repr(x))
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{'-' if x < 0 else ''}{mantissa}E{d.adjusted()}"
