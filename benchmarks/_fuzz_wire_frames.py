"""Wire frames for the ``wire`` fuzz target: a corpus of valid requests and their mutators.

Frame layout (``broker_embedded.server.protocol``): ``size int32`` + header + body. Header v1 =
``api_key int16, api_version int16, correlation_id int32, client_id int16-length string``;
header v2 (flexible versions, ApiVersions >= 3) adds tagged fields (an unsigned varint count,
then tag, size, bytes each). Bodies are kio's encoding of the request message.

The corpus (:func:`build_corpus`): for every (API key, version) the server announces, one or
more valid requests built field by field from kio's schema classes (:func:`build_message`):
each field's value is picked by its name and Kafka type (topics that exist, partitions 0 and 1,
small waits, real record batches of every codec from ``_fuzz_corpus``), with per-variant
overrides (Produce once per codec and with acks 0; Fetch without a session, opening one and
incremental in a live one, read_committed; Metadata of all topics and of named ones;
CreateTopics validating only and creating). Destructive APIs name scratch topics only, and no
frame names the probe topic ``wire-data`` except reads.

Mutators (:data:`MUTATORS`, and :func:`field_value`, which builds the request again with one
integer field at a boundary value) take a frame (bytes) and a ``random.Random`` and return the
bytes to send and what was done: bit flips, interesting bytes, byte insert/delete (size kept or
fixed), the size set to boundary values (0, -1, 2^31-1, ...), an int16/int32 inside the frame
set to a boundary value (the length fields of strings, arrays and records), truncation, two
frames spliced, random API key or version, a compact varint made huge, garbage tagged fields,
frames pipelined. Pure functions of their arguments; thread-safe given a ``random.Random`` per
thread.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from benchmarks._fuzz_corpus import CODECS, legacy_run, v2_batch
from broker_embedded.protocol.schemas import encode_body, request_schema
from broker_embedded.record.varint import encode_uvarint

TOPIC_DATA = "wire-data"  # known batches; read by the probe; written by no frame
TOPIC_IN = "wire-in"  # the Produce / DeleteRecords target
SCRATCH = "wire-scratch"  # created, grown and deleted by the admin frames
GROUP = "wire-group"
CLIENT_ID = "fuzz"
MAX_WAIT_MS = 20  # every Fetch of the corpus waits at most this long
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id (after the size)
INT16 = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x100)
INT32 = (0, 1, -1, 2, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 1 << 20, 1 << 24)
SIZES = (0, 1, -1, 4, 7, 8, 2**31 - 1, -(2**31), 104857600, 104857601, 65536)
HUGE_VARINTS = (
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x07",
    b"\x80\x80\x80\x80\x08",
    b"\xff" * 10 + b"\x01",
    b"\xfe\xff\xff\xff\x0f",
)


@dataclass(frozen=True)
class Frame:
    """One valid request frame of the corpus: ``name`` says API, version and variant."""

    name: str
    api_key: int
    version: int
    data: bytes
    values: dict[str, Any] = field(default_factory=dict, compare=False)  # what built it


@dataclass(frozen=True)
class Context:
    """What the corpus must know of the live server: topic ids and a fetch session."""

    topic_ids: dict[str, uuid.UUID]
    session_id: int = 0
    ranges: tuple[tuple[int, int, int], ...] = ()  # (api key, min version, max version)


# -- building valid messages ---------------------------------------------------------------------


def frame_of(message: Any, correlation_id: int, client_id: str | None = CLIENT_ID) -> bytes:
    """A whole request frame for a kio request message (header v1 or v2 by its version)."""
    header_class = RequestHeaderV2 if message.__flexible__ else RequestHeaderV1
    header = header_class(
        request_api_key=message.__api_key__,
        request_api_version=message.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    payload = encode_body(header) + encode_body(message)
    return _SIZE.pack(len(payload)) + payload


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _entity_of(hint: Any) -> type | None:
    """The nested entity class of a field's type (``tuple[X, ...]``, ``X | None`` or ``X``)."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _entity_of(arg)
        if found is not None:
            return found
    return None


def _is_sequence(hint: Any) -> bool:
    return any(typing.get_origin(a) is tuple for a in (hint, *typing.get_args(hint)))


def build_message(cls: type, values: dict[str, Any]) -> Any:
    """An instance of the kio class ``cls``: each field from ``values`` (by name) when given,
    else :func:`default_value`; nested entities built the same way."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        hint = _hints(cls)[f.name]
        if f.name in values:
            value = values[f.name]
            entity = _entity_of(hint)
            if entity is not None and isinstance(value, list):  # a list of overrides each
                value = tuple(build_message(entity, v) for v in value)
            kwargs[f.name] = value
            continue
        entity = _entity_of(hint)
        if entity is not None:
            one = build_message(entity, values)
            kwargs[f.name] = (one,) if _is_sequence(hint) else one
        else:
            value = default_value(f.name, f.metadata.get("kafka_type"), values)
            kwargs[f.name] = (value,) if _is_sequence(hint) and value is not None else value
    return cls(**kwargs)


_BY_NAME: dict[str, Any] = {
    "acks": 1,
    "producer_epoch": -1,
    "replication_factor": 1,
    "num_partitions": 1,
    "count": 3,
    "max_bytes": 1 << 20,
    "min_bytes": 0,
    "partition_max_bytes": 1 << 16,
    "session_id": 0,
    "session_epoch": -1,
    "replica_id": -1,
    "fetch_offset": 0,
    "log_start_offset": -1,
    "offset": 1,
    "timestamp": -1,
    "committed_offset": 5,
    "producer_id": -1,
    "isolation_level": 0,
    "key_type": 0,
    "resource_type": 2,
    "endpoint_type": 1,
    "client_software_name": "kafkalog-fuzz",
    "client_software_version": "1.0",
    "rack_id": "",
    "cluster_id": None,
    "member_id": "",
    "group_instance_id": None,
    "committed_metadata": "m",
    "configuration_keys": None,
    "transactional_id": None,
    "group_id": GROUP,
    "coordinator_keys": GROUP,
    "key": GROUP,
    "value": "86400000",
    "generation_id_or_member_epoch": -1,
    "member_epoch": -1,
    "replica_epoch": -1,
    "high_watermark": -1,
}
_DURATIONS = {"max_wait": MAX_WAIT_MS, "timeout": 1000, "transaction_timeout": 60_000}


def default_value(name: str, kafka_type: str | None, values: dict[str, Any]) -> Any:
    """The valid value of a scalar field by its name and Kafka type (see the module docstring);
    ``values["topic"]`` is the topic name of the frame."""
    if name in ("name", "topic", "topic_names", "resource_name"):
        return values["topic"]
    if kafka_type == "uuid":
        return values.get("topic_uuid", uuid.UUID(int=0)) if name == "topic_id" else None
    if kafka_type == "records":
        return values.get("batch", v2_batch(0, "none", 3))
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=_DURATIONS.get(name, 1000))
    if kafka_type == "timedelta_i64":
        return datetime.timedelta(milliseconds=-1)
    if kafka_type == "bool":
        return name.startswith("include_")
    if name in _BY_NAME:
        return _BY_NAME[name]
    if kafka_type and kafka_type.startswith("int"):
        return 0  # partitions, indexes, epochs left: partition 0, epoch 0
    return "x"


# -- the variants of each API ---------------------------------------------------------------------

Variants = list[tuple[str, dict[str, Any]]]


def _produce(ctx: Context, version: int) -> Variants:
    topic = {"topic": TOPIC_IN, "topic_uuid": ctx.topic_ids[TOPIC_IN]}  # by id from v13
    out: Variants = [
        (f"codec-{codec}", topic | {"batch": v2_batch(0, codec, 4)}) for codec in CODECS
    ]
    two = [{"index": 0, "records": v2_batch(0, "zstd", 2)}, {"index": 1, "records": None}]
    out += [
        ("acks0", topic | {"acks": 0, "batch": v2_batch(0, "lz4", 2)}),
        ("acks-all", topic | {"acks": -1, "batch": v2_batch(0, "gzip", 2)}),
        ("two-partitions", topic | {"partition_data": two}),
        ("idempotent", topic | {"batch": v2_batch(0, "snappy", 3, producer_id=7)}),
        ("legacy", topic | {"batch": legacy_run(1, "gzip")}),
    ]
    return out


def _fetch(ctx: Context, version: int) -> Variants:
    base = {
        "topic": TOPIC_DATA,
        "topic_uuid": ctx.topic_ids[TOPIC_DATA],
        "forgotten_topics_data": (),
    }
    parts = [{"partition": 0, "fetch_offset": 0}, {"partition": 1, "fetch_offset": 2}]
    out: Variants = [
        ("sessionless", base | {"partitions": parts}),
        ("read-committed", base | {"isolation_level": 1, "fetch_offset": 3}),
        ("past-end", base | {"fetch_offset": 1000, "max_wait": datetime.timedelta(0)}),
    ]
    if version >= 7:
        out += [
            ("new-session", base | {"session_epoch": 0, "partitions": parts}),
            ("incremental", base | {"session_id": ctx.session_id, "session_epoch": 1}),
            ("close-session", base | {"session_id": ctx.session_id, "session_epoch": -1}),
        ]
    return out


def _metadata(ctx: Context, version: int) -> Variants:
    named = {"topic": TOPIC_DATA, "topic_uuid": uuid.UUID(int=0)}
    if version >= 10:
        named["topic_uuid"] = None
    out: Variants = [
        ("named", named),
        (
            "in-and-missing",
            named
            | {
                "topics": [
                    named,
                    {
                        "topic": "wire-none",
                        "topic_uuid": None if version >= 10 else uuid.UUID(int=0),
                    },
                ]
            },
        ),
    ]
    if version >= 1:
        out.append(("all", {"topic": TOPIC_DATA, "topics": None}))
    return out


def _create_topics(ctx: Context, version: int) -> Variants:
    return [
        ("validate", {"topic": SCRATCH, "validate_only": True, "num_partitions": 2}),
        ("create", {"topic": SCRATCH, "num_partitions": 1, "configs": ()}),
        ("bad-config", {"topic": SCRATCH + "-c", "key": "retention.ms", "value": "x"}),
    ]


def _single(topic: str, **values: Any) -> Callable[[Context, int], Variants]:
    return lambda ctx, version: [("", {"topic": topic} | values)]


API_VARIANTS: dict[int, Callable[[Context, int], Variants]] = {
    0: _produce,
    1: _fetch,
    2: lambda ctx, v: [
        ("latest", {"topic": TOPIC_DATA}),
        ("earliest", {"topic": TOPIC_IN, "timestamp": -2}),
        ("max-ts", {"topic": TOPIC_DATA, "timestamp": -3}),
    ],
    3: _metadata,
    8: _single(TOPIC_DATA),
    9: lambda ctx, v: (
        [("named", {"topic": TOPIC_DATA})]
        + [("all", {"topic": TOPIC_DATA, "topics": None})] * (v >= 2)
    ),
    10: _single(TOPIC_DATA),
    18: _single(TOPIC_DATA),
    19: _create_topics,
    20: _single(SCRATCH, topic_uuid=None),
    21: _single(TOPIC_IN),
    22: lambda ctx, v: [
        ("plain", {"topic": TOPIC_DATA}),
        ("txn", {"topic": TOPIC_DATA, "transactional_id": "wire-txn"}),
    ],
    32: _single(TOPIC_DATA),
    37: _single(SCRATCH),
    60: _single(TOPIC_DATA),
}


def build_corpus(ctx: Context) -> list[Frame]:
    """Every variant of every served (API key, version), correlation ids 1, 2, ..."""
    frames: list[Frame] = []
    for api_key, low, high in ctx.ranges:
        variants = API_VARIANTS.get(api_key)
        for version in range(low, high + 1):
            schema = request_schema(api_key, version)
            if schema is None or variants is None:
                continue
            for label, values in variants(ctx, version):
                message = build_message(schema, values)
                data = frame_of(message, len(frames) + 1)
                frames.append(
                    Frame(
                        f"{schema.__name__}v{version}{'/' + label if label else ''}",
                        api_key,
                        version,
                        data,
                        values,
                    )
                )
    return frames


# -- mutators --------------------------------------------------------------------------------------


def with_size(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def bit_flip(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        buf[rng.randrange(4, len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf), "bit_flip"


def interesting_byte(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    buf[rng.randrange(4, len(buf))] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE))
    return bytes(buf), "interesting_byte"


def boundary_field(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """An int16 or int32 anywhere in the body (lengths of strings, arrays, records) set to a
    boundary value."""
    buf = bytearray(data)
    fmt, pool = rng.choice(((">h", INT16), (">i", INT32)))
    width = struct.calcsize(fmt)
    if len(buf) < 4 + width:
        return bit_flip(data, rng, other)
    pos = rng.randrange(4, len(buf) - width + 1)
    struct.pack_into(fmt, buf, pos, rng.choice(pool))
    return bytes(buf), f"boundary_{fmt[1]}"


def frame_size(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """The size prefix set to a boundary value or off by a little."""
    size = rng.choice(SIZES + (len(data) - 5, len(data) - 3, len(data) * 2))
    return _SIZE.pack(size) + data[4:], "frame_size"


def insert_delete(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    body = bytearray(data[4:])
    pos = rng.randrange(len(body) + 1)
    if rng.random() < 0.5:
        body[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        kind = "insert"
    else:
        del body[pos : pos + rng.randrange(1, 16)]
        kind = "delete"
    if rng.random() < 0.7:
        return with_size(bytes(body)), kind + "_sized"
    return data[:4] + bytes(body), kind


def truncate(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    cut = rng.randrange(0, len(data))
    if rng.random() < 0.5:  # size fixed: a whole frame whose body ends early
        return with_size(data[4:cut] if cut > 4 else b""), "truncate_sized"
    return data[:cut], "truncate"  # the client stops mid-frame


def splice(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """The start of this frame and the end of another (size fixed)."""
    a = rng.randrange(4, len(data) + 1)
    b = rng.randrange(4, len(other) + 1)
    if rng.random() < 0.3:  # this header (api key, version) on the other's body
        a, b = min(len(data), 12), min(len(other), 12)
    return with_size(data[4:a] + other[b:]), "splice"


def api_key_version(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    if len(data) < 12:
        return bit_flip(data, rng, other)
    buf = bytearray(data)
    key, version, corr = _HEAD.unpack_from(buf, 4)
    if rng.random() < 0.5:
        key = rng.choice((rng.randrange(0, 80), -1, 0x7FFF, -0x8000, 18, 0, 1, 3))
    else:
        version = rng.choice((rng.randrange(0, 20), -1, 0x7FFF, -0x8000, version + 1, version - 1))
    _HEAD.pack_into(buf, 4, key, max(-0x8000, min(version, 0x7FFF)), corr)
    return bytes(buf), "api_key_version"


def huge_varint(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """A byte (a compact length or count, in flexible versions) replaced by a huge varint."""
    body = bytearray(data[4:])
    pos = rng.randrange(8, len(body)) if len(body) > 8 else len(body)
    body[pos : pos + 1] = rng.choice(HUGE_VARINTS)
    return with_size(bytes(body)), "huge_varint"


def tagged_garbage(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """Tagged fields with garbage: after the header's client id or at the body's end."""
    body = bytearray(data[4:])
    count = rng.choice((1, 2, 0x7F, 0x80))
    tags = b"".join(
        bytes([rng.choice((0, 1, 2, 5, 0x7F))])
        + rng.choice((b"\x00", b"\x01x", b"\x7f", b"\xff\xff\xff\xff\x0f", b"\x05abc"))
        for _ in range(min(count, 3))
    )
    garbage = encode_uvarint(count) + tags
    client_id_len = struct.unpack_from(">h", body, 8)[0] if len(body) >= 10 else 0
    header_end = 10 + max(client_id_len, 0)
    if rng.random() < 0.5 and header_end < len(body):
        body[header_end : header_end + 1] = garbage
    elif body:
        body[-1:] = garbage
    return with_size(bytes(body)), "tagged_garbage"


def pipeline(data: bytes, rng: random.Random, other: bytes) -> tuple[bytes, str]:
    """Several frames in one write: this one (mutated or not) between valid ones."""
    inner, kind = rng.choice(MUTATORS[:-1])(data, rng, other) if rng.random() < 0.6 else (data, "")
    return other + inner + other, f"pipeline{'+' + kind if kind else ''}"


Mutator = Callable[[bytes, random.Random, bytes], tuple[bytes, str]]
MUTATORS: tuple[Mutator, ...] = (
    bit_flip,
    bit_flip,
    interesting_byte,
    boundary_field,
    boundary_field,
    frame_size,
    insert_delete,
    truncate,
    splice,
    api_key_version,
    huge_varint,
    tagged_garbage,
    pipeline,  # last: pipeline applies one of the others
)


_INT_POOLS = {
    "int8": (-128, 127, -1, 0, 2),
    "int16": INT16,
    "int32": INT32,
    "int64": (-1, 0, 2**31, 2**63 - 1, -(2**63), 2**62),
    "uint16": (0, 0xFFFF, 0x8000),
}
_DURATION_POOL = (-1, 0, 2**31 - 1, 86_400_000, -(2**31))


@cache
def int_fields(schema: type) -> tuple[tuple[str, str], ...]:
    """(name, Kafka type) of every integer or duration field of ``schema``, nested included."""
    found: dict[str, str] = {}
    for f in dataclasses.fields(schema):
        entity = _entity_of(_hints(schema)[f.name])
        kafka_type = f.metadata.get("kafka_type", "")
        if entity is not None:
            found |= dict(int_fields(entity))
        elif kafka_type in _INT_POOLS or kafka_type.startswith("timedelta"):
            found[f.name] = kafka_type
    return tuple(sorted(found.items()))


def field_value(frame: Frame, rng: random.Random) -> tuple[bytes, str]:
    """The frame built again with one integer field (counts, partitions, offsets, waits, acks,
    epochs, sizes) at a boundary value: a valid encoding of a hostile request."""
    schema = request_schema(frame.api_key, frame.version)
    choices = int_fields(schema) if schema is not None and frame.values else ()
    if not choices:
        return boundary_field(frame.data, rng, frame.data)
    name, kafka_type = rng.choice(choices)
    if kafka_type.startswith("timedelta"):
        value: Any = datetime.timedelta(milliseconds=rng.choice(_DURATION_POOL))
    else:
        value = rng.choice(_INT_POOLS[kafka_type])
    (correlation_id,) = struct.unpack_from(">i", frame.data, 8)
    try:
        data = frame_of(build_message(schema, frame.values | {name: value}), correlation_id)
    except Exception:  # a value the field's type cannot hold: kio's writer refuses it
        return boundary_field(frame.data, rng, frame.data)
    return data, f"field_{name}={value}"


def mutate_frame(frame: Frame, other: Frame, rng: random.Random) -> tuple[bytes, str]:
    """One mutation of ``frame`` (``other``: a second corpus frame, for splices and pipelines);
    sometimes two stacked, sometimes none (the valid frame, sent in pieces), sometimes one of
    its fields at a boundary value (:func:`field_value`)."""
    if rng.random() < 0.05:
        return frame.data, "valid"
    if rng.random() < 0.15:
        return field_value(frame, rng)
    data, kind = rng.choice(MUTATORS)(frame.data, rng, other.data)
    if rng.random() < 0.1 and len(data) > 16:
        data, second = rng.choice(MUTATORS[:-1])(data, rng, other.data)
        kind += "+" + second
    return data, kind


def split_frames(data: bytes, max_request: int) -> tuple[list[bytes], bool]:
    """The whole frames of ``data`` by their size prefixes, and whether the bytes end exactly
    at a frame boundary (the server waits for the rest of a partial one; a negative or too
    large size ends the connection, so nothing after it counts)."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        if size < 0 or size > max_request or pos + 4 + size > len(data):
            return frames, False
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames, pos == len(data)
