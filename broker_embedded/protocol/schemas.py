"""kio's message classes by API key and version, and their readers and writers.

A body's bytes are what kio's ``entity_writer`` writes for the message (its class carries API key
and version); ``entity_reader(schema)(buffer, offset)`` reads one back as ``(message, size)``.
The ``records`` fields of Produce and Fetch are plain ``bytes``: one copy, no object per record.

:func:`make` builds a message (or a nested entity) from keyword values, dropping those its
version does not have (e.g. ``topic_id`` before Metadata v10), so one construction serves every
version; :func:`types_of` is the module holding a schema's nested classes for its version.

Pure functions and caches filled under the GIL: thread-safe.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

API_VERSIONS_KEY = 18


def api_name(api_key: int) -> str:
    """Kafka's name of an API key ("Metadata"), or "unknown" for a key Kafka does not define."""
    name = api_key_map.get(api_key)
    return "unknown" if name is None else name.title().replace("_", "")


def request_schema(api_key: int, api_version: int) -> type | None:
    """kio's request class for a key and version, or None when kio has none."""
    return _schema(load_request_schema, api_key, api_version)


def response_schema(api_key: int, api_version: int) -> type | None:
    """kio's response class for a key and version, or None when kio has none."""
    return _schema(load_response_schema, api_key, api_version)


def has_schemas(api_key: int, api_version: int) -> bool:
    """Whether kio has a request and a response class for a key and version, from its index
    alone: the classes load on first use (every version of every API served is some 400
    modules and 950 dataclasses, over a second at a server's start)."""
    entry = schema_name_map.get(api_key_map.get(api_key, ""), {}).get(api_version, {})
    return EntityType.request in entry and EntityType.response in entry


@cache
def _schema(load: Callable[[int, int], type], api_key: int, api_version: int) -> type | None:
    try:
        return load(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def reader_of(schema: type) -> Any:
    """kio's reader of ``schema``: ``reader(buffer, offset) -> (message, size)``."""
    return entity_reader(schema)


@cache
def writer_of(schema: type) -> Any:
    """kio's writer of ``schema``: ``writer(stream, message)``."""
    return entity_writer(schema)


def encode_body(message: Any) -> bytes:
    """A kio message's bytes (its schema class carries its version)."""
    out = io.BytesIO()
    writer_of(type(message))(out, message)
    return out.getvalue()


def types_of(schema: type) -> ModuleType:
    """The module of ``schema``'s nested classes (they differ per version)."""
    return sys.modules[schema.__module__]


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values: Any) -> Any:
    """``cls(**values)`` without the values ``cls`` has no field for."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})
