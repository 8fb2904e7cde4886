"""DescribeConfigs (API key 32), versions 1-4: the configs of topics and of this broker.

Resources (Kafka's ``ConfigResource.Type``):
- TOPIC (2): every topic config by Kafka's name (or only ``configuration_keys``; unknown keys
  are left out, as Kafka does), with its effective value. ``config_source``: 1
  DYNAMIC_TOPIC_CONFIG for the topic's overrides, 4 STATIC_BROKER_CONFIG for a value the broker
  config's ``[topic_defaults]`` sets away from Kafka's default, 5 DEFAULT_CONFIG otherwise.
  Not read-only, not sensitive. An unknown topic is UNKNOWN_TOPIC_OR_PARTITION (3), an illegal
  name INVALID_TOPIC_EXCEPTION (17).
- BROKER (4), named by this broker's id: the :class:`BrokerConfig` settings by Kafka's names,
  read-only (this broker has no dynamic configs), source 4 when set away from the default else
  5. Another id or a name that is no id is INVALID_REQUEST (42), as Kafka answers; the empty
  name (cluster-wide dynamic defaults) has no configs here.
- anything else (e.g. BROKER_LOGGER, 8): INVALID_REQUEST.
Synonyms are not listed (``include_synonyms`` answers none); ``documentation`` is null;
``config_type`` (v3+) is Kafka's type of the config (BOOLEAN 1, STRING 2, INT 3, LONG 5,
DOUBLE 6, LIST 7).

Thread safety: reads the controller's topic entry under its lock; nothing is kept.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import InvalidRequestError, KafkaApiError
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.topic_partition import validate_topic

API_KEY = 32
VERSIONS = (1, 4)
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_INT_CONFIGS = frozenset(
    {"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
     "min.insync.replicas"}
)  # fmt: skip
_LIST_CONFIGS = frozenset({"cleanup.policy"})


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config."""

    name: str
    value: str
    source: int
    read_only: bool
    config_type: int


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(describe_configs_response, ctx))


def describe_configs_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    results = tuple(_result(ctx, types, r) for r in request.body.resources)
    return make(types.DescribeConfigsResponse, throttle_time=timedelta(0), results=results)


def _result(ctx: ApiContext, types: ModuleType, resource: Any) -> Any:
    try:
        entries = resource_configs(ctx, resource.resource_type, resource.resource_name)
        error = None
    except KafkaApiError as e:
        entries, error = [], e
    keys = resource.configuration_keys
    if keys is not None:
        entries = [e for e in entries if e.name in keys]
    return make(
        types.DescribeConfigsResult,
        error_code=error_code(error),
        error_message=error_message(error),
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=tuple(_config(types, e) for e in entries),
    )


def _config(types: ModuleType, e: ConfigEntry) -> Any:
    return make(
        types.DescribeConfigsResourceResult, name=e.name, value=e.value, read_only=e.read_only,
        config_source=e.source, is_default=e.source == DEFAULT_CONFIG, is_sensitive=False,
        synonyms=(), config_type=e.config_type, documentation=None,
    )  # fmt: skip


def resource_configs(ctx: ApiContext, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        return topic_configs(ctx, name)
    if resource_type == BROKER:
        return broker_configs(ctx, name)
    raise InvalidRequestError(f"DescribeConfigs: unsupported resource type {resource_type}")


def topic_configs(ctx: ApiContext, topic: str) -> list[ConfigEntry]:
    """Every config of ``topic`` with its source (module docstring)."""
    validate_topic(topic)
    overrides = ctx.broker.describe_topic(topic).config
    effective = ctx.broker.topic_config(topic)
    kafka_defaults = LogConfig().to_properties()
    entries = []
    for name, value in effective.items():
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif value != kafka_defaults[name]:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, False, _topic_config_type(name, value)))
    return entries


def _topic_config_type(name: str, value: str) -> int:
    if name in _INT_CONFIGS:
        return INT
    if name in _LIST_CONFIGS:
        return LIST
    if value in ("true", "false"):
        return BOOLEAN
    try:
        int(value)
        return LONG
    except ValueError:
        pass
    try:
        float(value)
        return DOUBLE
    except ValueError:
        return STRING


def broker_configs(ctx: ApiContext, name: str) -> list[ConfigEntry]:
    """This broker's settings by Kafka's names (module docstring)."""
    if name == "":
        return []
    if not name.isdigit() or int(name) != ctx.broker_id:
        raise InvalidRequestError(
            f"DescribeConfigs: unexpected broker id {name!r}, this is broker {ctx.broker_id}"
        )
    config, default = ctx.broker.config, BrokerConfig()
    entries = []
    for f in fields(BrokerConfig):
        if f.name == "topic_defaults":
            continue
        value = getattr(config, f.name)
        source = DEFAULT_CONFIG if value == getattr(default, f.name) else STATIC_BROKER_CONFIG
        kind = DOUBLE if isinstance(value, float) else LONG
        entries.append(ConfigEntry(f.name.replace("_", "."), str(value), source, True, kind))
    return entries
