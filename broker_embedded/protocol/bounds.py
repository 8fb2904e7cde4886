"""Every length and count of a request checked against the bytes left, before kio reads it.

Why: kio 0.6.5's native reader sizes an array from the count it reads before reading the
elements. A count the frame cannot hold (a compact array length ``ff ff ff ff 0f``, 2^32 - 2
elements) makes it ask for 32 GiB, and a failed allocation in its Rust code aborts the process:
one frame of 20 bytes ended ``kafkalog serve`` ("memory allocation of 34359738352 bytes
failed", found by ``benchmarks/fuzz.py --only wire``). kio also raises ``KeyError`` for a tagged
field it does not know. :func:`check_bounds` walks the message the way kio will, by the kio
schema's fields, and raises :class:`BoundsError` first.

Layout walked (Kafka's, as kio encodes it): fixed-width fields (int8..int64, uint16, bool,
float64, uuid, timedeltas); strings with an int16 length (-1 null), bytes and records with an
int32 length (-1 null), arrays with an int32 count (-1 null); in flexible versions all of these
with an unsigned varint of length + 1 (0 null), and after each entity's fields its tagged
fields (a varint count, then per field a varint tag, a varint size and that many bytes, which
for a known tag hold the field's value). Null (-1, or 0 compact) only where the schema allows
it: kio's reader returns None for a null non-nullable array, which the handlers iterate (Kafka's
parsers reject it). The invariant checked: a length is at most the bytes
left in the frame (or in the tagged field holding it), and a count at most the bytes left
divided by the smallest size of one element (1 byte). So kio never allocates more than a few
times the frame's size, which ``socket.request.max.bytes`` bounds.

What it does not check (kio does): the values themselves, UTF-8, trailing bytes. Schema plans
are cached per class; pure functions otherwise: thread-safe.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from broker_embedded.errors import KafkaApiError

FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "float64": 8,
    "uuid": 16,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i32": 4,
    "datetime_i64": 8,
    "error_code": 2,
}
SIZED = {"string": 2, "bytes": 4, "records": 4}  # the width of the non-compact length
MAX_VARINT_BYTES = 5


class BoundsError(KafkaApiError):
    """A length, count or tag of a request that its frame cannot hold (or kio cannot read)."""

    code = 42
    name = "INVALID_REQUEST"


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str  # "entity", "entities", "primitives" or "primitive"
    kafka_type: str | None
    entity: Any
    nullable: bool


@cache
def _plan(cls: type) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    """The fields of ``cls`` in wire order, and its tagged fields by tag."""
    plain, tagged = [], {}
    for f in dataclasses.fields(cls):
        shape = classify_field(f)
        kind = {
            EntityField: "entity",
            EntityTupleField: "entities",
            PrimitiveTupleField: "primitives",
        }.get(type(shape), "primitive")
        entity = shape.type_ if kind in ("entity", "entities") else None
        field = _Field(f.name, kind, f.metadata.get("kafka_type"), entity, is_optional(f))
        if "tag" in f.metadata:
            tagged[int(f.metadata["tag"])] = field
        else:
            plain.append(field)
    return tuple(plain), tagged


class _Walker:
    def __init__(self, buf: memoryview, flexible: bool) -> None:
        self.buf, self.flexible = buf, flexible

    def fail(self, reason: str, pos: int) -> BoundsError:
        return BoundsError(f"{reason} at byte {pos}")

    def uvarint(self, pos: int, end: int) -> tuple[int, int]:
        value = shift = 0
        for i in range(MAX_VARINT_BYTES):
            if pos + i >= end:
                raise self.fail("varint past the end", pos)
            byte = self.buf[pos + i]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos + i + 1
            shift += 7
        raise self.fail("varint longer than 5 bytes", pos)

    def signed(self, pos: int, end: int, width: int) -> tuple[int, int]:
        if pos + width > end:
            raise self.fail(f"{width}-byte length past the end", pos)
        return int.from_bytes(self.buf[pos : pos + width], "big", signed=True), pos + width

    def length(self, pos: int, end: int, width: int, f: _Field) -> tuple[int, int]:
        """A length or count: -1 for null (if ``f`` is nullable), else at most the bytes left."""
        if self.flexible:
            value, pos = self.uvarint(pos, end)
            value -= 1
        else:
            value, pos = self.signed(pos, end, width)
        if value < -1 or value > end - pos:
            raise self.fail(f"{f.name}: length {value} with {end - pos} bytes left", pos)
        if value == -1 and not f.nullable:
            raise self.fail(f"null for the non-nullable field {f.name}", pos)
        return value, pos

    def primitive(self, f: _Field, pos: int, end: int) -> int:
        kafka_type = f.kafka_type
        width = FIXED.get(kafka_type or "")
        if width is not None:
            if pos + width > end:
                raise self.fail(f"{kafka_type} past the end", pos)
            return pos + width
        if kafka_type not in SIZED:
            raise self.fail(f"no bounds for kafka type {kafka_type}", pos)
        size, pos = self.length(pos, end, SIZED[kafka_type], f)
        return pos + max(size, 0)

    def field(self, f: _Field, pos: int, end: int) -> int:
        if f.kind == "primitive":
            return self.primitive(f, pos, end)
        if f.kind == "entity":
            return self.entity(f.entity, pos, end)
        count, pos = self.length(pos, end, 4, f)
        width = FIXED.get(f.kafka_type or "") if f.kind == "primitives" else None
        if width is not None:
            if pos + width * max(count, 0) > end:
                raise self.fail(f"{count} {f.kafka_type} with {end - pos} bytes left", pos)
            return pos + width * max(count, 0)
        for _ in range(count):
            pos = (
                self.entity(f.entity, pos, end)
                if f.kind == "entities"
                else self.primitive(f, pos, end)
            )
        return pos

    def entity(self, cls: type, pos: int, end: int) -> int:
        plain, tagged = _plan(cls)
        for f in plain:
            pos = self.field(f, pos, end)
        return self.tags(tagged, pos, end) if self.flexible else pos

    def tags(self, tagged: dict[int, _Field], pos: int, end: int) -> int:
        count, pos = self.uvarint(pos, end)
        if count > end - pos:
            raise self.fail(f"{count} tagged fields with {end - pos} bytes left", pos)
        for _ in range(count):
            tag, pos = self.uvarint(pos, end)
            size, pos = self.uvarint(pos, end)
            if size > end - pos:
                raise self.fail(f"tagged field {tag} of {size} bytes, {end - pos} left", pos)
            field = tagged.get(tag)
            if field is None:
                raise self.fail(f"unknown tagged field {tag}", pos)
            if self.field(field, pos, pos + size) > pos + size:
                raise self.fail(f"tagged field {tag} longer than its size", pos)
            pos += size
        return pos


def check_bounds(schema: type, buf: memoryview, offset: int) -> None:
    """Raise :class:`BoundsError` (naming the field and byte) when a length, count or tag of
    the ``schema`` message at ``offset`` is more than ``buf`` holds (see the module docstring)."""
    _Walker(buf, bool(schema.__flexible__)).entity(schema, offset, len(buf))


def check_header_tags(buf: memoryview, offset: int) -> None:
    """The tagged fields of a v2 request header at ``offset`` (it knows none: kio would raise
    KeyError for any)."""
    _Walker(buf, True).tags({}, offset, len(buf))
