"""A batch read over a log dir of many small partitions: packed into few tasks, and not.

    .venv/bin/python benchmarks/many_partitions.py [--topics T] [--partitions P]
                                                   [--records R] [--master M]
                                                   [--only unpacked|packed] [--plans N]

Builds, in a temporary directory deleted at the end, a log dir of T topics (default 100) of P
partitions (default 100) holding R records each (default 10: 12-byte keys, 100-byte values, one
prebuilt batch made once by ``columnar_encoder.encode_batches`` and appended to every partition
by the project's ``SegmentWriter``), then the log dir's replication, recovery point and log
start offset checkpoint files (a line per partition each), as a broker leaves them. The build
skips ``fsync`` (durability is not measured; with it, 10,000 partitions take minutes on a
network disk).

Then, in one SparkSession (``--master``, default ``local[2]``), for each configuration: planning
(``df.rdd.getNumPartitions()`` on a freshly loaded DataFrame: Spark asks the source for its
partitions in a Python worker; the number of tasks), the best of ``--plans`` (default 3), and
``count()`` (which plans again and reads), after a warm-up read of one topic (the Python workers
started, the compiled kernels loaded). The source's own planning
(``KafkaBatchReader.partitions()``, what Spark's planning worker calls) is also timed in this
process, best of ``--plans``, wall and CPU time: the CPU time is the figure that the machine's
load disturbs least.
Configurations (``--only`` runs one):

- unpacked: ``packBytesPerPartition=0``, one task per partition (what the source did before
  packing; each task now opens its partition with the planned checkpoint entries);
- packed: the defaults (``packBytesPerPartition=128m``, ``packOpenCostInBytes=4m``).

Prints a markdown table and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import _spark_common as common  # noqa: E402
import numpy as np  # noqa: E402

from broker_embedded.record import columnar_encoder  # noqa: E402
from broker_embedded.storage.offset_checkpoint import (  # noqa: E402
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.segment_writer import SegmentWriter  # noqa: E402
from broker_embedded.storage.topic_partition import TopicPartition  # noqa: E402

VALUE_BYTES = 100
CONFIGS = {"unpacked": {"packBytesPerPartition": "0"}, "packed": {}}


@contextmanager
def _no_fsync():
    saved = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = saved


def build(log_dir: Path, topics: int, partitions: int, records: int) -> int:
    """The log dir of the module docstring; its bytes of records."""
    rng = np.random.default_rng(42)
    alphabet = common.ALPHABET
    values = alphabet[rng.integers(0, len(alphabet), records * VALUE_BYTES, dtype=np.uint8)]
    ts = np.arange(common.BASE_TIMESTAMP, common.BASE_TIMESTAMP + records, dtype=np.int64)
    encoded = columnar_encoder.encode_batches(
        common._keys(np.arange(records)),
        common._fixed_width(records, VALUE_BYTES, values),
        ts,
        max_batch_bytes=1 << 20,
    )
    batches = bytes(encoded.data)
    log_dir.mkdir(parents=True)
    ends = {}
    with _no_fsync():
        for t in range(topics):
            topic_id = uuid.uuid4()
            for p in range(partitions):
                tp = TopicPartition(f"topic{t:03d}", p)
                with SegmentWriter(log_dir, tp, topic_id=topic_id) as writer:
                    writer.append(batches)
                    ends[tp] = writer.log_end_offset
        OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(ends)
        OffsetCheckpointFile(log_dir / RECOVERY_POINT_OFFSET_CHECKPOINT).write(ends)
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(dict.fromkeys(ends, 0))
    return len(batches) * len(ends)


def run(spark, log_dir: Path, options: dict[str, str], plans: int) -> tuple[int, float, int, float]:
    """(tasks, best planning s, rows, count s), each on a freshly loaded DataFrame."""
    best = float("inf")
    for _ in range(plans):
        df = (
            spark.read.format("kafkalog")
            .option("path", str(log_dir))
            .option("subscribePattern", "topic.*")
            .options(**options)
            .load()
        )
        t0 = time.perf_counter()
        tasks = df.rdd.getNumPartitions()
        best = min(best, time.perf_counter() - t0)
    t1 = time.perf_counter()
    rows = df.count()
    return tasks, best, rows, time.perf_counter() - t1


def plan_here(log_dir: Path, options: dict[str, str], plans: int) -> tuple[float, float]:
    """(best wall s, best CPU s) of the source's planning in this process."""
    from datasource.kafka_batch_reader import KafkaBatchReader
    from datasource.kafka_source_options import KafkaSourceOptions

    parsed = KafkaSourceOptions.parse(
        {"path": str(log_dir), "subscribePattern": "topic.*", **options}
    )
    wall = cpu = float("inf")
    for _ in range(plans):
        t0, c0 = time.perf_counter(), time.process_time()
        KafkaBatchReader(parsed).partitions()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def warm_up(spark, log_dir: Path) -> None:
    """A read of one topic first: the Python workers start and load the compiled kernels."""
    (
        spark.read.format("kafkalog")
        .option("path", str(log_dir))
        .option("subscribe", "topic000")
        .load()
        .count()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--only", choices=sorted(CONFIGS), help="run one configuration")
    ap.add_argument("--plans", type=int, default=3, help="plannings timed (the best counts)")
    args = ap.parse_args()
    configs = {args.only: CONFIGS[args.only]} if args.only else CONFIGS
    tmp = Path(tempfile.mkdtemp(prefix="kafkalog-many-"))
    try:
        t0 = time.perf_counter()
        size = build(tmp / "logdir", args.topics, args.partitions, args.records)
        built = time.perf_counter() - t0
        spark = common.start_spark("many-partitions", args.master, 2, "2g", "ERROR")
        warm_up(spark, tmp / "logdir")
        load_before = os.getloadavg()
        results = {
            name: run(spark, tmp / "logdir", opts, args.plans) for name, opts in configs.items()
        }
        load_after = os.getloadavg()
        spark.stop()
        here = {name: plan_here(tmp / "logdir", opts, args.plans) for name, opts in configs.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.topics * args.partitions
    print(
        f"\n{args.topics} topics x {args.partitions} partitions x {args.records} records "
        f"({n * args.records:,} rows, {size / 1e6:.1f} MB of batches; built in {built:.1f} s), "
        f"{args.master}, {common.cpu_model()}, load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after\n"
    )
    print("| read | tasks | plan (s) | plan in process (s) | its CPU (s) | count (s) | rows |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (tasks, plan, rows, count) in results.items():
        wall, cpu = here[name]
        print(
            f"| {name} | {tasks:,} | {plan:.2f} | {wall:.2f} | {cpu:.2f} | {count:.1f} | {rows:,} |"
        )


if __name__ == "__main__":
    main()
