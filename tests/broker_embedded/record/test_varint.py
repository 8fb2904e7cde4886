"""Kafka's zigzag varints and varlongs, and the flexible protocol's unsigned varints."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    zigzag_decode,
    zigzag_encode,
)

VARINT_ANSWERS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (2, "04"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (300, "d804"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_ANSWERS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (1700000000000, "80a0abfef962"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MAX + 1, "8080808010"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]
UVARINT_ANSWERS = [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02")] + [
    (0xFFFFFFFF, "ffffffff0f")
]


@pytest.mark.parametrize(("value", "hex_"), VARINT_ANSWERS)
def test_varint_known_answers(value: int, hex_: str) -> None:
    assert encode_varint(value).hex() == hex_
    assert decode_varint(bytes.fromhex(hex_)) == (value, len(hex_) // 2)


@pytest.mark.parametrize(("value", "hex_"), VARLONG_ANSWERS)
def test_varlong_known_answers(value: int, hex_: str) -> None:
    assert encode_varlong(value).hex() == hex_
    assert decode_varlong(bytes.fromhex(hex_)) == (value, len(hex_) // 2)


@pytest.mark.parametrize(("value", "hex_"), UVARINT_ANSWERS)
def test_uvarint_known_answers(value: int, hex_: str) -> None:
    assert encode_uvarint(value).hex() == hex_
    assert decode_uvarint(bytes.fromhex(hex_)) == (value, len(hex_) // 2)


def test_zigzag() -> None:
    assert [zigzag_encode(n, 32) for n in (0, -1, 1, -2, INT32_MAX, INT32_MIN)] == [
        0,
        1,
        2,
        3,
        0xFFFFFFFE,
        0xFFFFFFFF,
    ]
    assert [zigzag_decode(z) for z in (0, 1, 2, 3, 0xFFFFFFFE, 0xFFFFFFFF)] == [
        0,
        -1,
        1,
        -2,
        INT32_MAX,
        INT32_MIN,
    ]


def test_decode_at_position_returns_the_next_position() -> None:
    buf = b"\xaa" + encode_varint(-65) + encode_varlong(1 << 40) + encode_uvarint(300)
    value, pos = decode_varint(buf, 1)
    assert (value, pos) == (-65, 3)
    value, pos = decode_varlong(buf, pos)
    assert (value, pos) == (1 << 40, 9)
    assert decode_uvarint(buf, pos) == (300, 11)


def test_non_minimal_encodings_are_read_as_java_does() -> None:
    assert decode_varint(b"\x80\x00") == (0, 2)
    assert decode_varint(b"\x81\x80\x80\x80\x00") == (-1, 5)


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
        (encode_uvarint, -1),
        (encode_uvarint, 1 << 32),
    ],
)
def test_encode_out_of_range(encode: Callable[[int], bytes], value: int) -> None:
    with pytest.raises(ValueError, match=str(value)):
        encode(value)


@pytest.mark.parametrize(
    ("decode", "data", "message"),
    [
        (decode_varint, b"", "varint truncated"),
        (decode_varint, b"\x80", "varint truncated"),
        (decode_varint, b"\xff\xff\xff\xff", "varint truncated"),
        (decode_varint, b"\x80\x80\x80\x80\x80\x00", "varint longer than 5 bytes"),
        (decode_varint, b"\xff\xff\xff\xff\x1f", "varint out of int32 range"),
        (decode_varlong, b"\x80" * 9, "varlong truncated"),
        (decode_varlong, b"\x80" * 10 + b"\x00", "varlong longer than 10 bytes"),
        (decode_varlong, b"\xff" * 9 + b"\x03", "varlong out of int64 range"),
        (decode_uvarint, b"\x80\x80", "unsigned varint truncated"),
        (decode_uvarint, b"\x80" * 5 + b"\x01", "unsigned varint longer than 5 bytes"),
        (decode_uvarint, b"\xff\xff\xff\xff\x10", "unsigned varint out of uint32 range"),
    ],
)
def test_decode_rejects(
    decode: Callable[[bytes, int], tuple[int, int]], data: bytes, message: str
) -> None:
    with pytest.raises(CorruptRecordError, match=message) as info:
        decode(b"\x00\x00" + data, 2)
    assert info.value.position == 2
    assert "at byte 2" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(INT32_MIN, INT32_MAX), max_size=20))
def test_varint_round_trip(values: list[int]) -> None:
    buf = b"".join(encode_varint(v) for v in values)
    pos = 0
    for v in values:
        got, pos = decode_varint(buf, pos)
        assert got == v
    assert pos == len(buf)


@settings(max_examples=200, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    data = encode_varlong(value)
    assert len(data) <= 10
    assert decode_varlong(data) == (value, len(data))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFFFFFF))
def test_uvarint_round_trip(value: int) -> None:
    data = encode_uvarint(value)
    assert len(data) <= 5
    assert decode_uvarint(data) == (value, len(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=12))
def test_decoders_only_raise_corrupt_record_error(data: bytes) -> None:
    for decode in (decode_varint, decode_varlong, decode_uvarint):
        try:
            _, end = decode(data)
        except CorruptRecordError:
            continue
        assert 0 < end <= len(data)
