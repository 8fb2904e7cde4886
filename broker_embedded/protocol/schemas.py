"""kio's message classes by API key and version, and their readers and writers.

A body's bytes are what kio's ``entity_writer`` writes for the message (its class carries API key
and version); ``entity_reader(schema)(buffer, offset)`` reads one back as ``(message, size)``.
The ``records`` fields of Produce and Fetch are plain ``bytes``: one copy, no object per record.

:func:`make` builds a message (or a nested entity) from keyword values, dropping those its
version does not have but another version of the same message does (e.g. ``topic_id`` before
Metadata v10), so one construction serves every version; a name no version has (a misspelt
field, which dropped would be a wrong response) is an :class:`UnknownFieldError` naming the
class and the field. Its cost: only a call passing a value its class lacks looks further, and
the first such call for a class imports every version of that class's module (once per class
and process; 0.1 to 0.3 s for Metadata's response classes here), then reads a cache.
:func:`types_of` is the module holding a schema's nested classes for its
version.

Pure functions and caches filled under the GIL: thread-safe.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import sys
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

API_VERSIONS_KEY = 18
_VERSION_PACKAGE = re.compile(r"v\d+")


class UnknownFieldError(TypeError):
    """A value given to :func:`make` for a field that no version of the message has."""


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
    """``cls(**values)`` without the values of fields that ``cls``'s version lacks and another
    version of the same class has; :class:`UnknownFieldError` for a name no version has."""
    names = _field_names(cls)
    extra = values.keys() - names
    if not extra:
        return cls(**values)
    unknown = extra - _fields_of_every_version(cls)
    if unknown:
        given = ", ".join(map(repr, sorted(unknown)))
        raise UnknownFieldError(
            f"{cls.__module__}.{cls.__qualname__} has no field {given} in any version (its "
            f"fields: {', '.join(sorted(names))})"
        )
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def _fields_of_every_version(cls: type) -> frozenset[str]:
    """The field names of the classes named as ``cls`` in every version of its message
    (``kio.schema.<api>.v<N>.<module>``; a plural name is the same class: OffsetFetch v8 renamed
    ``OffsetFetchResponseTopic`` ``OffsetFetchResponseTopics``); ``cls``'s own for a class
    outside that layout."""
    parts = cls.__module__.split(".")
    at = next((i for i, p in enumerate(parts) if _VERSION_PACKAGE.fullmatch(p)), None)
    if at is None:
        return _field_names(cls)
    package = importlib.import_module(".".join(parts[:at]))
    found = set(_field_names(cls))
    singular = cls.__name__.removesuffix("s")
    for version in pkgutil.iter_modules(package.__path__):
        if not _VERSION_PACKAGE.fullmatch(version.name):
            continue
        try:
            module = importlib.import_module(
                ".".join([*parts[:at], version.name, *parts[at + 1 :]])
            )
        except ModuleNotFoundError:
            continue
        for name, other in vars(module).items():
            if name.removesuffix("s") == singular and is_dataclass(other):
                found |= _field_names(other)
    return frozenset(found)
