"""The differential harness: one request to two servers, both answers as plain data, their
differences.

- :class:`Connection` sends one request (API key, version, values as plain dicts and lists)
  over a raw socket to a bootstrap address and decodes the answer with the server's own
  codec (kio's schemas through ``broker_embedded.protocol.schemas``: no second parser);
- :func:`to_plain` turns a kio message into nested dicts/lists of ints, strings and bytes
  (``throttle_time`` and the other durations as milliseconds, error codes by name, UUIDs as
  strings, ``records`` as the decoded batches, see :func:`plain_batches`);
- :class:`Normalizer` replaces what must differ between two brokers (see :data:`MASKED`,
  :data:`CLOCK` and :data:`MAPPED`) by stable tokens: a value that must differ is masked, an
  id that only has to be consistent within one sequence of requests (member, producer, fetch
  session ids) is replaced by the order in which it first appeared;
- :func:`diff` lists the differences of two plain values as :class:`Difference` (field path,
  Kafka's value, kafkalog's value).

Not thread-safe: one connection and one normalizer per server per scenario.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
import struct
import time
import types
import typing
import uuid
from collections.abc import Iterator
from functools import cache
from typing import Any

from broker_embedded.client.client_security import ClientSecurity, authenticate
from broker_embedded.error_code import ErrorCode
from broker_embedded.protocol.schemas import (
    API_VERSIONS_KEY,
    api_name,
    reader_of,
    request_schema,
    response_schema,
)
from broker_embedded.record.records import iter_batches
from tests.broker_embedded.server._net import RawClient, request_frame

TIMEOUT_S = 30.0
Login = tuple[str, str]  # a SCRAM user and password

# Fields whose values must differ between two brokers: replaced by "<masked>" when not null,
# not empty and not -1 (the "none" of ids and times, which must agree).
MASKED = frozenset(
    {
        "cluster_id",
        "topic_id",
        "host",
        "port",
        "throttle_time",
        "error_message",
        "auth_bytes",  # a SCRAM exchange's salt and nonces
    }
)

# Times a broker takes from its clock: masked when within a day of now (the fixed timestamps
# the scenarios write stay compared: a duplicate's log append time is its batch's).
CLOCK = frozenset(
    {
        "log_append_time",
        "timestamp",
        "current_state_timestamp",
        "transaction_start_time",
    }
)
_DAY_MS = 86_400_000

# Fields whose values only have to agree within one sequence: replaced by "<kind#n>" where n
# counts the distinct values seen (per kind) in the order they appeared.
MAPPED = {
    "member_id": "member",
    "leader": "member",
    "producer_id": "producer",
    "session_id": "session",
    "memberid": "member",
}


# Fields where 0 means "none" (no throttle, no fetch session), kept as it is.
_ZERO_IS_NONE = frozenset({"throttle_time", "session_id", "log_append_time"})


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    path: str
    kafka: Any
    kafkalog: Any


# -- building requests -------------------------------------------------------------------------


def build(schema: type, values: dict[str, Any]) -> Any:
    """A kio message (or nested entity) of ``schema`` from plain values; fields the version
    lacks are dropped, fields not given take their defaults (the caller gives the rest)."""
    hints = _hints(schema)
    kwargs = {}
    for name, value in values.items():
        if name in hints:
            kwargs[name] = _build_value(hints[name], value)
    return schema(**kwargs)


@cache
def _hints(schema: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(schema)}
    return {k: v for k, v in typing.get_type_hints(schema).items() if k in names}


def _build_value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin is tuple:
        (inner, *_) = typing.get_args(hint)
        return tuple(_build_value(inner, v) for v in value)
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in typing.get_args(hint) if a is not type(None))
        return _build_value(inner, value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value)
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    if isinstance(hint, type) and issubclass(hint, uuid.UUID) and isinstance(value, str):
        return uuid.UUID(value)
    return value


# -- decoding answers ----------------------------------------------------------------------------


def to_plain(value: Any, field: str = "") -> Any:
    """A kio value as plain data (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(v, field) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview) and field == "records":
        return plain_batches(bytes(value))
    if value is None or isinstance(value, bool | float):
        return value
    for kind in (int, str, bytes):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"no plain form for {type(value).__name__} in field {field!r}")


def plain_batches(data: bytes) -> dict[str, Any]:
    """The batches of a ``records`` field as consumers see them (headers, then records with
    their absolute offsets), and the bytes after the last whole batch (a partial batch at the
    end of a Fetch). The CRC is checked, not compared: timestamps set by a broker change it."""
    batches = []
    whole = 0
    for batch in iter_batches(data):
        whole += batch.size_in_bytes
        head = {
            name: getattr(batch, name)
            for name in (
                "base_offset",
                "partition_leader_epoch",
                "magic",
                "attributes",
                "last_offset_delta",
                "base_timestamp",
                "max_timestamp_raw",
                "producer_id",
                "producer_epoch",
                "base_sequence",
                "records_count",
            )
        }
        head["crc_valid"] = batch.is_valid()
        head["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": r.key,
                "value": r.value,
                "headers": [list(h) for h in r.headers],
            }
            for r in batch.records()
        ]
        batches.append(head)
    return {"batches": batches, "partial_tail_bytes": len(data) - whole}


class Connection:
    """One blocking connection to a broker; :meth:`call` sends a request and decodes its
    answer."""

    def __init__(
        self, bootstrap: str, timeout: float = TIMEOUT_S, login: Login | None = None
    ) -> None:
        """``login``: a SCRAM-SHA-256 user and password, authenticated before anything else
        (kafkalog's client exchange, not compared)."""
        _host, _, port = bootstrap.split(",")[0].rpartition(":")  # both servers: 127.0.0.1
        self._raw = RawClient(int(port), timeout)
        self._correlation = 0
        if login is not None:
            user, password = login
            security = ClientSecurity(
                "SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username=user, password=password
            )
            try:
                authenticate(self._raw_call, security, bootstrap)
            except BaseException:
                self.close()
                raise

    def _raw_call(self, api_key: int, version: int, **values: Any) -> Any:
        """The answer as the client's exchange reads it (attributes, numeric error codes)."""
        answer = self.call(api_key, version, values)
        code = answer["error_code"]
        answer["error_code"] = 0 if code == "none" else ErrorCode[code].value
        return types.SimpleNamespace(**answer)

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> dict[str, Any]:
        """The plain answer to one request of ``api_key`` at ``version``."""
        return self.receive(self.send(api_key, version, values))

    def send(self, api_key: int, version: int, values: dict[str, Any]) -> tuple[int, int, int]:
        """Send one request; what :meth:`receive` needs to read its answer."""
        schema = request_schema(api_key, version)
        if schema is None:
            raise ValueError(f"kio has no {api_name(api_key)} v{version} request")
        self._correlation += 1
        self._raw.send(request_frame(build(schema, values), self._correlation, "diff"))
        return api_key, version, self._correlation

    def receive(self, sent: tuple[int, int, int]) -> dict[str, Any]:
        """The plain answer to the request :meth:`send` sent (the next frame on the socket)."""
        api_key, version, correlation_id = sent
        frame = self._raw.recv_frame()
        (correlation,) = struct.unpack_from(">i", frame)
        assert correlation == correlation_id, (correlation, correlation_id)
        answer = response_schema(api_key, version)
        offset = 5 if answer.__flexible__ and api_key != API_VERSIONS_KEY else 4
        body, _ = reader_of(answer)(memoryview(frame), offset)
        return to_plain(body)


# -- normalizing and comparing -----------------------------------------------------------------


class Normalizer:
    """Replaces the values of :data:`MASKED` and :data:`MAPPED` fields (one per server and
    scenario: the mapped ids are numbered in the order this server's answers showed them)."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[Any, str]] = {}

    def __call__(self, value: Any, field: str = "") -> Any:
        if isinstance(value, dict) and value.get("attributes", 0) & LOG_APPEND_TIME_BIT:
            value = _mask_append_times(value)
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, field) for v in value]
        if value is None or value in ("", -1) or (value == 0 and field in _ZERO_IS_NONE):
            return value
        if field in MASKED:
            return "<masked>"
        if field in CLOCK and isinstance(value, int) and abs(value - time.time() * 1000) < _DAY_MS:
            return "<now>"
        if field in MAPPED:
            kind = MAPPED[field]
            seen = self._seen.setdefault(kind, {})
            return seen.setdefault(value, f"<{kind}#{len(seen)}>")
        return value


LOG_APPEND_TIME_BIT = 0x08  # a batch's attributes: timestamp type LogAppendTime


def _mask_append_times(batch: dict[str, Any]) -> dict[str, Any]:
    """A LogAppendTime batch with its broker-set times masked (max timestamp, and the records'
    timestamps, which consumers read as the batch's max timestamp)."""
    records = [{**r, "timestamp": "<masked>"} for r in batch.get("records", [])]
    return {**batch, "max_timestamp_raw": "<masked>", "records": records}


def diff(kafka: Any, kafkalog: Any, path: str = "") -> list[Difference]:
    """Every leaf where the two plain values differ (a missing key or list element is ``None``
    on its side, shown as "<absent>")."""
    return list(_diff(kafka, kafkalog, path))


ABSENT = "<absent>"


def _diff(a: Any, b: Any, path: str) -> Iterator[Difference]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            yield from _diff(a.get(key, ABSENT), b.get(key, ABSENT), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and (key := _keyed(a, b)):
        yield from _diff(_by_key(a, key), _by_key(b, key), path)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            left = a[i] if i < len(a) else ABSENT
            right = b[i] if i < len(b) else ABSENT
            yield from _diff(left, right, f"{path}[{i}]")
    elif a != b:
        yield Difference(path, a, b)


# Lists of entries named by one of these fields, unique in the list (topics, partitions,
# configs) are compared by that name, in any order (Kafka's order is its hash maps').
KEYS = ("name", "topic", "partition_index", "member_id", "group_id")


def _key_of(items: list[Any]) -> str | None:
    for key in KEYS:
        names = [i.get(key) if isinstance(i, dict) else None for i in items]
        if names and None not in names and len(set(names)) == len(names):
            return key
    return None


def _keyed(a: list[Any], b: list[Any]) -> str | None:
    key = _key_of(a) or _key_of(b)
    return key if key is not None and key == (_key_of(b) or key) == (_key_of(a) or key) else None


def _by_key(items: list[Any], key: str) -> dict[str, Any]:
    return {f"{{{i[key]}}}": i for i in items}


def leaves(value: Any) -> int:
    """How many leaf values a plain value holds (the fields compared)."""
    if isinstance(value, dict):
        return sum(leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(leaves(v) for v in value)
    return 1


def field_name(path: str) -> str:
    """A difference's path without list indices and topic names: the field it names
    (``.topics.partitions.error_code``; entries named by other keys keep them:
    ``.configs{retention.ms}.value``)."""
    return re.sub(r"\[\d+\]|\.\{diff-[^}]*\}", "", path)
