"""Spark's Kafka source schema, defined once: the columns a read of a Kafka log gives.

``key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp,
timestampType int`` and, when headers are asked for, ``headers array<struct<key: string,
value: binary>>`` (Spark's ``KafkaRecordToRowConverter``). Every field is
nullable, as Spark declares it.

Two spellings of the same columns, both derived from :data:`COLUMNS` and :data:`HEADERS`:

- Spark DDL (:func:`schema_ddl`, :func:`simple_string`): what the data source declares and
  what a user-given schema is compared with; plain strings, so the data source module that
  Spark imports to look sources up stays light;
- Arrow (:func:`arrow_schema`): what the columnar decoder builds, exactly what Spark's
  ``to_arrow_schema`` gives for the DDL (timestamps in microseconds, UTC; the list's child
  named ``element``). pyarrow is imported on first call.

Constants and cached immutable schemas: thread-safe.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# (name, Spark SQL type) of the columns without headers, in order
COLUMNS: tuple[tuple[str, str], ...] = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
)
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
# (name, Spark SQL type) of the header struct's fields
HEADER_FIELDS: tuple[tuple[str, str], ...] = (("key", "string"), ("value", "binary"))
HEADERS_SQL_TYPE = "array<struct<" + ",".join(f"{n}:{t}" for n, t in HEADER_FIELDS) + ">>"
HEADERS = ("headers", HEADERS_SQL_TYPE)


def schema_ddl(include_headers: bool = False) -> str:
    """The schema as a DDL string (``key binary, value binary, ...``)."""
    columns = (*COLUMNS, HEADERS) if include_headers else COLUMNS
    return ", ".join(f"{name} {type_}" for name, type_ in columns)


def simple_string(include_headers: bool = False) -> str:
    """The schema as Spark's ``StructType.simpleString()`` writes it."""
    columns = (*COLUMNS, HEADERS) if include_headers else COLUMNS
    return "struct<" + ",".join(f"{name}:{type_}" for name, type_ in columns) + ">"


@functools.cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The schema as Arrow (what Spark's ``to_arrow_schema`` gives for :func:`schema_ddl`)."""
    import pyarrow as pa

    fields = [pa.field(name, _arrow_type(type_)) for name, type_ in COLUMNS]
    if include_headers:
        fields.append(pa.field(HEADERS[0], arrow_headers_type()))
    return pa.schema(fields)


@functools.cache
def arrow_headers_type() -> pa.DataType:
    """``list<element: struct<key: string, value: binary>>``."""
    import pyarrow as pa

    struct = pa.struct([pa.field(name, _arrow_type(type_)) for name, type_ in HEADER_FIELDS])
    return pa.list_(pa.field("element", struct))


def _arrow_type(sql_type: str) -> pa.DataType:
    import pyarrow as pa

    return {
        "binary": pa.binary(),
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[sql_type]
