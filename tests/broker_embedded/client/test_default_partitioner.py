"""Kafka's default partitioner: murmur2 against Kafka's own known answers and kafka-python's
implementation, the scalar and the vectorized (numba) versions against each other."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from broker_embedded.client import default_partitioner
from broker_embedded.client.default_partitioner import (
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

INT32_MAX = (1 << 31) - 1
# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils)
JAVA_KNOWN_ANSWERS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    default_partitioner.warm_up()


def _kafka_python_partition(key: bytes, num_partitions: int) -> int:
    # kafka-python's DefaultPartitioner.partition, minus the cluster metadata
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions


def _random_keys(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    keys = [rng.randbytes(length) for length in range(21) for _ in range(count // 21)]
    keys += [rng.randbytes(rng.randrange(21, 300)) for _ in range(count // 10)]
    return [b"", *keys]


@pytest.mark.parametrize(("key", "expected"), JAVA_KNOWN_ANSWERS.items())
def test_murmur2_known_answers_from_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert kafka_python_murmur2(key) == expected & 0xFFFFFFFF  # the oracle agrees


def test_murmur2_equals_kafka_python_on_random_keys() -> None:
    keys = _random_keys(21_000, seed=1)
    assert len({len(k) for k in keys} & set(range(21))) == 21
    assert [murmur2(k) & 0xFFFFFFFF for k in keys] == [kafka_python_murmur2(k) for k in keys]
    assert all(-(1 << 31) <= murmur2(k) < 1 << 31 for k in keys)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64), num_partitions=st.integers(1, 10_000))
def test_partition_for_key_equals_kafka_python(key: bytes, num_partitions: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert partition_for_key(key, num_partitions) == _kafka_python_partition(key, num_partitions)


def test_to_positive_is_a_mask_not_abs() -> None:
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert partition_for_key(b"21", INT32_MAX) == (-973932308 & 0x7FFFFFFF) % INT32_MAX


def test_partition_for_key_accepts_bytes_likes_and_refuses_bad_input() -> None:
    assert partition_for_key(bytearray(b"foobar"), 7) == partition_for_key(b"foobar", 7)
    assert partition_for_key(memoryview(b"foobar"), 7) == partition_for_key(b"foobar", 7)
    with pytest.raises(ValueError, match="null key"):
        partition_for_key(None, 3)  # type: ignore[arg-type]
    for bad in (0, -1, 1 << 31):
        with pytest.raises(ValueError, match="partition count"):
            partition_for_key(b"k", bad)


@pytest.mark.parametrize("num_partitions", [1, 3, 12, 1000, INT32_MAX])
def test_vectorized_equals_kafka_python(num_partitions: int) -> None:
    keys = _random_keys(4200, seed=num_partitions)
    result = partitions_for_keys(pa.array(keys, pa.binary()), num_partitions)
    assert result.dtype == np.int32
    assert result.tolist() == [_kafka_python_partition(k, num_partitions) for k in keys]


def test_vectorized_null_keys_are_minus_one() -> None:
    keys = [b"a", None, b"", None, b"foobar"]
    result = partitions_for_keys(pa.array(keys), 5)
    assert result.tolist() == [
        partition_for_key(b"a", 5),
        -1,
        partition_for_key(b"", 5),
        -1,
        partition_for_key(b"foobar", 5),
    ]
    assert partitions_for_keys(pa.nulls(3), 5).tolist() == [-1, -1, -1]
    assert partitions_for_keys(pa.nulls(3, pa.binary()), 5).tolist() == [-1, -1, -1]


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.none() | st.binary(max_size=30), max_size=50),
    start=st.integers(0, 5),
    num_partitions=st.integers(1, 50),
    type_=st.sampled_from([pa.binary(), pa.large_binary()]),
)
def test_vectorized_on_sliced_arrays(
    keys: list[bytes | None], start: int, num_partitions: int, type_: pa.DataType
) -> None:
    array = pa.array([b"junk", None] * 3 + keys, type_).slice(6 + min(start, len(keys)))
    expected = [-1 if k is None else partition_for_key(k, num_partitions) for k in keys[start:]]
    assert partitions_for_keys(array, num_partitions).tolist() == expected


def test_vectorized_string_and_chunked_columns() -> None:
    texts = ["order-1", "ключ", "", None, "🔑"]
    expected = [None if t is None else partition_for_key(t.encode(), 9) for t in texts]
    expected = [-1 if e is None else e for e in expected]
    for array in (
        pa.array(texts, pa.string()),
        pa.array(texts, pa.large_string()),
        pa.chunked_array([pa.array(texts[:2]), pa.array(texts[2:])]),
    ):
        assert partitions_for_keys(array, 9).tolist() == expected
    assert partitions_for_keys(pa.array([], pa.binary()), 9).tolist() == []


def test_vectorized_bad_input() -> None:
    with pytest.raises(TypeError, match="binary or string"):
        partitions_for_keys(pa.array([1, 2]), 3)
    with pytest.raises(TypeError, match="pyarrow array"):
        partitions_for_keys([b"a"], 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition count"):
        partitions_for_keys(pa.array([b"a"]), 0)
