"""Kafka's message encoding (the generated ``Message.read``/``write`` of its JSON schemas) for the
records of the internal topics: a reader and a writer of the field types those schemas use.

Byte layout (big-endian, Kafka's ``GroupCoordinatorRecordSerde``):

- ``int8/int16/int32/int64``: two's complement, fixed width;
- non-flexible versions: ``string`` int16 length + UTF-8 (-1 = null), ``bytes`` int32 length +
  bytes (-1 = null), ``array`` int32 count + elements (-1 = null);
- flexible versions: compact forms, an unsigned varint of ``length + 1`` (0 = null) before the
  string, bytes or array, and after every struct its tagged fields: an unsigned varint count,
  then per field (tags strictly increasing) an unsigned varint tag, an unsigned varint size and
  ``size`` bytes.

Records of the internal topics are version-prefixed (Kafka's
``MessageUtil.toVersionPrefixedBytes``): an int16 version, then the message in that version.

Errors: reading past the end, a negative length other than -1, a length past the end, invalid
UTF-8 or tags out of order raise :class:`MessageFormatError` (never ``struct.error`` or
``IndexError``); the record modules add the topic, partition and offset. Writing a value that
does not fit its type raises :class:`MessageEncodeError`. Bytes after the last field are ignored
on read, as Kafka's generated readers do. A :class:`MessageReader` and a :class:`MessageWriter`
are owned by one thread; the module holds no state.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

from broker_embedded.errors import CorruptRecordError, KafkaLogError
from broker_embedded.record.varint import decode_uvarint, encode_uvarint

T = TypeVar("T")
TaggedFields = tuple[tuple[int, bytes], ...]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# A length larger than this is refused before anything is allocated (Kafka's records hold at
# most message.max.bytes; 2^31 - 1 is the int32 limit of every length field).
MAX_LENGTH = (1 << 31) - 1


class MessageFormatError(KafkaLogError):
    """Bytes that do not read as the message schema says (the reason, without the place)."""


class MessageEncodeError(KafkaLogError):
    """A value that the message schema cannot hold (out of range, null where not nullable)."""


class MessageReader:
    """Reads the fields of one message from ``data`` at ``pos`` (see the module docstring)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def _take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise MessageFormatError(
                f"{what} needs {n} bytes at byte {self.pos} but only "
                f"{len(self.data) - self.pos} remain"
            )
        view = self.data[self.pos : end]
        self.pos = end
        return view

    def _fixed(self, s: struct.Struct, what: str) -> int:
        return s.unpack(self._take(s.size, what))[0]

    def int8(self, what: str) -> int:
        return self._fixed(_INT8, what)

    def int16(self, what: str) -> int:
        return self._fixed(_INT16, what)

    def int32(self, what: str) -> int:
        return self._fixed(_INT32, what)

    def int64(self, what: str) -> int:
        return self._fixed(_INT64, what)

    def uvarint(self, what: str) -> int:
        try:
            value, self.pos = decode_uvarint(self.data, self.pos)
        except CorruptRecordError as e:
            raise MessageFormatError(f"{what}: {e.reason}") from None
        return value

    def _length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length or count: -1 for null."""
        if flexible:
            n = self.uvarint(what) - 1
        else:
            n = self.int32(what) if wide else self.int16(what)
        if n < -1:
            raise MessageFormatError(f"{what} has length {n}")
        return n

    def nullable_string(self, flexible: bool, what: str) -> str | None:
        n = self._length(flexible, False, what)
        if n == -1:
            return None
        raw = self._take(n, what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise MessageFormatError(f"{what} is not valid UTF-8 ({e.reason})") from None

    def string(self, flexible: bool, what: str) -> str:
        s = self.nullable_string(flexible, what)
        if s is None:
            raise MessageFormatError(f"{what} is null but the schema does not allow it")
        return s

    def nullable_bytes(self, flexible: bool, what: str) -> bytes | None:
        n = self._length(flexible, True, what)
        return None if n == -1 else bytes(self._take(n, what))

    def bytes_(self, flexible: bool, what: str) -> bytes:
        b = self.nullable_bytes(flexible, what)
        if b is None:
            raise MessageFormatError(f"{what} is null but the schema does not allow it")
        return b

    def nullable_array(
        self, flexible: bool, what: str, element: Callable[[], T]
    ) -> tuple[T, ...] | None:
        n = self._length(flexible, True, what)
        if n == -1:
            return None
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise MessageFormatError(
                f"{what} declares {n} elements but only {len(self.data) - self.pos} bytes remain"
            )
        return tuple(element() for _ in range(n))

    def array(self, flexible: bool, what: str, element: Callable[[], T]) -> tuple[T, ...]:
        items = self.nullable_array(flexible, what, element)
        if items is None:
            raise MessageFormatError(f"{what} is null but the schema does not allow it")
        return items

    def tagged_fields(self, what: str) -> dict[int, bytes]:
        """The tagged fields of a flexible struct: tag -> raw bytes, tags strictly increasing."""
        count = self.uvarint(f"{what} tagged field count")
        fields: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = self.uvarint(f"{what} tag")
            if tag <= previous:
                raise MessageFormatError(f"{what}: tag {tag} follows tag {previous}")
            size = self.uvarint(f"{what} tag {tag} size")
            fields[tag] = bytes(self._take(size, f"{what} tag {tag}"))
            previous = tag
        return fields


def pack_int(s: struct.Struct, value: int, what: str) -> bytes:
    """``value`` as the fixed-width integer ``s``, or :class:`MessageEncodeError`."""
    try:
        return s.pack(value)
    except struct.error:
        raise MessageEncodeError(
            f"{what} = {value!r} does not fit in {s.size * 8}-bit signed"
        ) from None


def tagged_int(raw: bytes, s: struct.Struct, what: str) -> int:
    """A tagged field holding one fixed-width integer."""
    if len(raw) != s.size:
        raise MessageFormatError(f"{what} has {len(raw)} bytes, not {s.size}")
    return s.unpack(raw)[0]


class MessageWriter:
    """Appends the fields of one message to a buffer (see the module docstring)."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def _fixed(self, s: struct.Struct, value: int, what: str) -> None:
        self.out += pack_int(s, value, what)

    def int8(self, value: int, what: str) -> None:
        self._fixed(_INT8, value, what)

    def int16(self, value: int, what: str) -> None:
        self._fixed(_INT16, value, what)

    def int32(self, value: int, what: str) -> None:
        self._fixed(_INT32, value, what)

    def int64(self, value: int, what: str) -> None:
        self._fixed(_INT64, value, what)

    def _length(self, n: int, flexible: bool, wide: bool, what: str) -> None:
        if flexible:
            self.out += encode_uvarint(n + 1)
        elif wide:
            self.int32(n, what)
        else:
            if n > 0x7FFF:
                raise MessageEncodeError(f"{what} is {n} bytes, more than an int16 length holds")
            self.int16(n, what)

    def nullable_string(self, value: str | None, flexible: bool, what: str) -> None:
        if value is None:
            self._length(-1, flexible, False, what)
            return
        raw = value.encode("utf-8")
        self._length(len(raw), flexible, False, what)
        self.out += raw

    def string(self, value: str, flexible: bool, what: str) -> None:
        if value is None:
            raise MessageEncodeError(f"{what} is null but the schema does not allow it")
        self.nullable_string(value, flexible, what)

    def nullable_bytes(self, value: bytes | None, flexible: bool, what: str) -> None:
        if value is None:
            self._length(-1, flexible, True, what)
            return
        self._length(len(value), flexible, True, what)
        self.out += value

    def bytes_(self, value: bytes, flexible: bool, what: str) -> None:
        if value is None:
            raise MessageEncodeError(f"{what} is null but the schema does not allow it")
        self.nullable_bytes(value, flexible, what)

    def array(
        self,
        items: Sequence[T] | None,
        flexible: bool,
        what: str,
        element: Callable[[T], None],
        *,
        nullable: bool = False,
    ) -> None:
        if items is None:
            if not nullable:
                raise MessageEncodeError(f"{what} is null but the schema does not allow it")
            self._length(-1, flexible, True, what)
            return
        self._length(len(items), flexible, True, what)
        for item in items:
            element(item)

    def tagged_fields(self, fields: dict[int, bytes]) -> None:
        """Tagged fields in tag order (``fields``: tag -> raw bytes)."""
        self.out += encode_uvarint(len(fields))
        for tag in sorted(fields):
            if tag < 0:
                raise MessageEncodeError(f"tag {tag} is negative")
            self.out += encode_uvarint(tag) + encode_uvarint(len(fields[tag])) + fields[tag]

    def getvalue(self) -> bytes:
        return bytes(self.out)


def version_prefixed(version: int, write: Callable[[MessageWriter], None]) -> bytes:
    """Kafka's ``MessageUtil.toVersionPrefixedBytes``: int16 version, then the message."""
    w = MessageWriter()
    w.int16(version, "version")
    write(w)
    return w.getvalue()


def check_version(
    version: int, valid: range, what: str, error: type[KafkaLogError] = MessageFormatError
) -> None:
    """``error`` unless ``version`` is one of ``valid`` (format error on read, encode error on
    write)."""
    if version not in valid:
        raise error(
            f"{what} version {version} is not one Kafka defines ({valid.start}-{valid.stop - 1})"
        )


def unknown_tags(fields: dict[int, bytes], known: Sequence[int]) -> TaggedFields:
    """The tagged fields a schema does not name, kept to be written back unchanged."""
    return tuple((t, raw) for t, raw in sorted(fields.items()) if t not in known)


INT16 = _INT16
INT32 = _INT32
INT64 = _INT64
