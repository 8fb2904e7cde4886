"""The ceiling of a Python data source read, for benchmarks/spark_read.py: ``arrow_ceiling``.

A minimal PySpark data source with Spark's Kafka schema (the kafkalog schema) whose tasks do no
reading and no decoding: each builds ONE Arrow record batch of ``batchRows`` rows (12-byte keys,
``valueBytes``-byte values) and yields it over and over (a slice of it last) until it has
yielded its share of ``rows``, so that what is measured is only Spark's cost of moving Arrow
batches from the Python worker into the JVM.

Options (strings): ``rows``, ``partitions``, ``valueBytes``, ``batchRows``, ``topic``.
It lives in its own module (not the benchmark's ``__main__``) so that the Python workers import
it by name: the benchmark puts this directory on their ``PYTHONPATH``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from broker_embedded.record.kafka_schema import COLUMN_NAMES, schema_ddl

SCHEMA = schema_ddl()


class CeilingPartition(InputPartition):
    def __init__(self, partition: int, rows: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.rows = rows


class ArrowCeilingReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.partition_count = int(options.get("partitions", "4"))
        self.value_bytes = int(options.get("valuebytes", "100"))
        self.batch_rows = int(options.get("batchrows", "50000"))
        self.topic = options.get("topic", "bench")

    def partitions(self) -> list[CeilingPartition]:
        n = self.partition_count
        return [
            CeilingPartition(p, self.rows * (p + 1) // n - self.rows * p // n) for p in range(n)
        ]

    def read(self, partition: InputPartition) -> Iterator:
        import numpy as np
        import pyarrow as pa

        assert isinstance(partition, CeilingPartition)
        batch = _batch(np, pa, partition.partition, self.batch_rows, self.value_bytes, self.topic)
        left = partition.rows
        while left > 0:
            yield batch if left >= batch.num_rows else batch.slice(0, left)
            left -= batch.num_rows


def _batch(np, pa, partition: int, n: int, value_bytes: int, topic: str):
    rng = np.random.default_rng(partition)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)

    def binary(width: int, prefix: bytes = b"") -> pa.Array:
        data = alphabet[rng.integers(0, len(alphabet), n * width, dtype=np.uint8)].reshape(n, -1)
        data[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    ts = np.arange(n, dtype=np.int64) * 1000 + 1_700_000_000_000_000  # microseconds
    return pa.RecordBatch.from_arrays(
        [
            binary(12, b"key-"),
            binary(value_bytes),
            pa.array([topic] * n, pa.string()),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(ts, pa.timestamp("us", tz="UTC")),
            pa.array(np.zeros(n, np.int32)),
        ],
        names=list(COLUMN_NAMES),
    )


class ArrowCeilingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_ceiling"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return ArrowCeilingReader(dict(self.options))
