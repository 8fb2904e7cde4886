"""What the Spark benchmarks (spark_read.py, streaming.py) share: the log dir they read, their
SparkSession and the machine's CPU model.

The log dir: an embedded ``Broker``, a topic ``bench`` of P partitions with no retention, N
records spread evenly over them, 12-byte keys ``key-%08d``, V-byte random alphanumeric values,
CreateTime timestamps 1 ms apart; produced as prebuilt record batches v2 of about B bytes of
records made by ``columnar_encoder.encode_batches``, ``CHUNK_ROWS`` rows per call; the broker is
closed at the end. Imported by the benchmarks after they put the repository on ``sys.path``.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from broker_embedded.broker import Broker
from broker_embedded.record import columnar_encoder

TOPIC = "bench"
KEY_BYTES = 12  # b"key-" + 8 digits
BASE_TIMESTAMP = 1_700_000_000_000
CHUNK_ROWS = 200_000  # rows encoded per encode_batches call
NO_RETENTION = {"retention.ms": -1, "retention.bytes": -1}
ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)


def _fixed_width(n: int, width: int, data: np.ndarray) -> pa.Array:
    """A binary array of ``n`` values of ``width`` bytes each, built from buffers."""
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _keys(ids: np.ndarray) -> pa.Array:
    """b"key-%08d" of each id."""
    n = len(ids)
    data = np.empty((n, KEY_BYTES), np.uint8)
    data[:, :4] = np.frombuffer(b"key-", np.uint8)
    data[:, 4:] = (ids[:, None] // 10 ** np.arange(7, -1, -1)) % 10 + ord("0")
    return _fixed_width(n, KEY_BYTES, data)


def encoded_batches(
    rows: int,
    partitions: int,
    value_bytes: int,
    batch_bytes: int,
    *,
    seed: int,
    random_keys: bool,
    compression: str = "none",
) -> Iterator[tuple[int, columnar_encoder.EncodedBatches]]:
    """(partition, its next batches) for ``rows`` records over ``partitions`` partitions, the
    same for the same arguments. Key ids are random in [0, 10**8) with ``random_keys``, else the
    record's number. ``compression``: the batches' codec (a Kafka ``compression.type`` name);
    ``batch_bytes`` counts their records before compression."""
    rng = np.random.default_rng(seed)
    for p in range(partitions):
        first, last = rows * p // partitions, rows * (p + 1) // partitions
        for lo in range(first, last, CHUNK_ROWS):
            n = min(last, lo + CHUNK_ROWS) - lo
            ids = rng.integers(0, 10**8, n) if random_keys else np.arange(lo, lo + n)
            values = ALPHABET[rng.integers(0, len(ALPHABET), n * value_bytes, dtype=np.uint8)]
            yield (
                p,
                columnar_encoder.encode_batches(
                    _keys(ids),
                    _fixed_width(n, value_bytes, values),
                    np.arange(BASE_TIMESTAMP + lo, BASE_TIMESTAMP + lo + n, dtype=np.int64),
                    compression=compression,
                    max_batch_bytes=batch_bytes,
                ),
            )


def build_log_dir(
    log_dir: Path,
    rows: int,
    partitions: int,
    value_bytes: int,
    batch_bytes: int,
    *,
    seed: int,
    random_keys: bool,
    compression: str = "none",
    segment_bytes: int | None = None,
) -> tuple[int, int]:
    """Produce :func:`encoded_batches` into ``TOPIC`` of a new log dir (segments of
    ``segment_bytes``, default Kafka's 1 GiB); (batches, bytes) produced."""
    batches = size = 0
    config = dict(NO_RETENTION, **({"segment.bytes": segment_bytes} if segment_bytes else {}))
    with Broker(log_dir, create=True) as broker:
        broker.create_topic(TOPIC, partitions, config=config)
        chunks = encoded_batches(
            rows,
            partitions,
            value_bytes,
            batch_bytes,
            seed=seed,
            random_keys=random_keys,
            compression=compression,
        )
        for p, encoded in chunks:
            for batch in encoded:
                broker.produce(TOPIC, p, batch, acks=1)
            batches += len(encoded)
            size += len(encoded.data)
    return batches, size


def start_spark(
    app_name: str,
    master: str,
    partitions: int,
    driver_memory: str,
    log_level: str,
    extra_conf: dict[str, str] | None = None,
):
    """A SparkSession whose Python workers run this interpreter: no UI, no progress bars,
    ``spark.sql.shuffle.partitions`` = ``partitions``, session time zone UTC, then
    ``extra_conf``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory)
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def descendants_cpu_seconds() -> float:
    """User + system CPU seconds so far of this process's descendants (the JVM Spark started
    and its Python workers), with the children they reaped (``/proc/PID/stat`` fields 14 to 17):
    what a read costs in CPU, which a loaded machine changes far less than its wall time."""
    parents: dict[int, list[tuple[int, list[str]]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            parents.setdefault(int(fields[1]), []).append((int(entry), fields))
    ticks, todo = 0, [os.getpid()]
    while todo:
        for pid, fields in parents.get(todo.pop(), ()):
            ticks += sum(int(f) for f in fields[11:15])
            todo.append(pid)
    return ticks / os.sysconf("SC_CLK_TCK")
