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

What it does not check (kio does): the values themselves, UTF-8, trailing bytes. Each schema
class is compiled once (cached) into a list of steps in which runs of fixed-width fields are one
skip, so a check costs a few microseconds; pure functions otherwise: thread-safe.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from broker_embedded.errors import InvalidRequestError

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


class BoundsError(InvalidRequestError):
    """A length, count or tag of a request that its frame cannot hold (or kio cannot read)
    (INVALID_REQUEST, 42)."""


_LENGTH = {2: struct.Struct(">h"), 4: struct.Struct(">i")}
SKIP, SIZED_FIELD, ENTITY, ARRAY = range(4)
# a step: (kind, argument, nullable, field name); ARRAY's argument is the element's step
Step = tuple[int, Any, bool, str]


@cache
def _steps(cls: type) -> tuple[tuple[Step, ...], dict[int, Step]]:
    """The wire steps of ``cls`` (fixed-width runs merged) and its tagged fields' steps by tag."""
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    for f in dataclasses.fields(cls):
        step = _step(f)
        if "tag" in f.metadata:
            tagged[int(f.metadata["tag"])] = step
        elif step[0] == SKIP and steps and steps[-1][0] == SKIP:
            steps[-1] = (SKIP, steps[-1][1] + step[1], False, f.name)
        else:
            steps.append(step)
    return tuple(steps), tagged


def _step(f: dataclasses.Field) -> Step:
    shape = classify_field(f)
    nullable = is_optional(f)
    if isinstance(shape, (EntityField, EntityTupleField)):
        one: Step = (ENTITY, shape.type_, False, f.name)
    else:
        one = _primitive(f.metadata.get("kafka_type"), nullable, f.name)
    if isinstance(shape, (EntityTupleField, PrimitiveTupleField)):
        return (ARRAY, one, nullable, f.name)
    return one


def _primitive(kafka_type: str | None, nullable: bool, name: str) -> Step:
    if kafka_type in FIXED:
        return (SKIP, FIXED[kafka_type], False, name)
    if kafka_type in SIZED:
        return (SIZED_FIELD, SIZED[kafka_type], nullable, name)
    raise TypeError(f"no bounds for kafka type {kafka_type} of {name}")


def _fail(reason: str, pos: int) -> BoundsError:
    return BoundsError(f"{reason} at byte {pos}")


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= end:
            raise _fail("varint past the end", pos)
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + i + 1
        shift += 7
    raise _fail("varint longer than 5 bytes", pos)


def _length(buf: memoryview, pos: int, end: int, step: Step, width: int, flexible: bool):
    """A length or count: -1 for null (if the field is nullable), else at most the bytes left."""
    if flexible:
        value, pos = _uvarint(buf, pos, end)
        value -= 1
    elif pos + width > end:
        raise _fail(f"{step[3]}: {width}-byte length past the end", pos)
    else:
        value = _LENGTH[width].unpack_from(buf, pos)[0]
        pos += width
    if value < -1 or value > end - pos:
        raise _fail(f"{step[3]}: length {value} with {end - pos} bytes left", pos)
    if value == -1 and not step[2]:
        raise _fail(f"null for the non-nullable field {step[3]}", pos)
    return value, pos


def _walk(step: Step, buf: memoryview, pos: int, end: int, flexible: bool) -> int:
    kind, arg = step[0], step[1]
    if kind == SKIP:
        if pos + arg > end:
            raise _fail(f"{step[3]} past the end", pos)
        return pos + arg
    if kind == SIZED_FIELD:
        size, pos = _length(buf, pos, end, step, arg, flexible)
        return pos + max(size, 0)
    if kind == ENTITY:
        return _entity(arg, buf, pos, end, flexible)
    count, pos = _length(buf, pos, end, step, 4, flexible)
    if arg[0] == SKIP:  # fixed-width elements: one check
        if pos + arg[1] * max(count, 0) > end:
            raise _fail(f"{step[3]}: {count} elements with {end - pos} bytes left", pos)
        return pos + arg[1] * max(count, 0)
    for _ in range(count):
        pos = _walk(arg, buf, pos, end, flexible)
    return pos


def _entity(cls: type, buf: memoryview, pos: int, end: int, flexible: bool) -> int:
    steps, tagged = _steps(cls)
    for step in steps:
        pos = _walk(step, buf, pos, end, flexible)
    return _tags(tagged, buf, pos, end) if flexible else pos


def _tags(tagged: dict[int, Step], buf: memoryview, pos: int, end: int) -> int:
    if pos < end and buf[pos] == 0:  # none: the common case
        return pos + 1
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise _fail(f"{count} tagged fields with {end - pos} bytes left", pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise _fail(f"tagged field {tag} of {size} bytes, {end - pos} left", pos)
        step = tagged.get(tag)
        if step is None:
            raise _fail(f"unknown tagged field {tag}", pos)
        if _walk(step, buf, pos, pos + size, True) > pos + size:
            raise _fail(f"tagged field {tag} longer than its size", pos)
        pos += size
    return pos


def check_bounds(schema: type, buf: memoryview, offset: int) -> None:
    """Raise :class:`BoundsError` (naming the field and byte) when a length, count or tag of
    the ``schema`` message at ``offset`` is more than ``buf`` holds (see the module docstring)."""
    _entity(schema, buf, offset, len(buf), bool(schema.__flexible__))


def check_header_tags(buf: memoryview, offset: int) -> None:
    """The tagged fields of a v2 request header at ``offset`` (it knows none: kio would raise
    KeyError for any)."""
    _tags({}, buf, offset, len(buf))
