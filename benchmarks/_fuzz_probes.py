"""Probes: the expensive or structural checks of the fuzz campaign, run a few times per campaign
rather than per mutated input. Each returns the number of inputs it tried and raises
:class:`Finding` on a defect; each works in its own temporary directory.

- ``bomb``: a log dir of valid zstd batches of a few KB that inflate to 200 MiB each, read by a
  ``kafkalog consume`` subprocess; its peak RSS (``wait4``) reading six of them must not exceed
  its peak reading three by more than a slack: memory flat whatever the number of batches (issue
  11 part 2 item 2: the decompressed size was capped per batch, not per call). One such batch
  (200 records of 1 MiB) costs about 640 MiB alone and the allocators keep some of it for the
  next, so a plateau near 1 GiB is the floor, not growth.
- ``epoch``: the last batch's partition leader epoch set to 2^31-1 (not covered by the CRC), the
  clean shutdown marker removed, ``kafkalog topics list``: a one-line error or success, never a
  traceback (item 3).
- ``open_files``: a log dir of 2,000 partitions opened by ``kafkalog topics list`` under
  ``ulimit -n 1024``: success, or an error saying which limit to raise (item 5).
- ``plain_dir``: ``topics list``, ``consume`` and ``dump`` on an ordinary directory must not
  write into it, and a file given as ``--log-dir`` is said not to be a directory (items 6, 7).
- ``topic_names``: topic names that collide in metrics (``a.b`` / ``a_b``) must not both be
  accepted (item 7).
- ``consume_subprocess``: ``kafkalog consume`` as a subprocess on a mutated log dir: exit 0 or 1,
  no traceback on stderr.
- ``spark``: a Spark batch read (``spark.read.format("kafkalog")``) of mutated log dirs: the
  records, or a failed query whose error is the domain error; never rows missing silently.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._fuzz_logdir import TOPIC, LogDirTarget, listing, run_cli
from benchmarks._fuzz_mutators import unprotected
from benchmarks._fuzz_oracle import Finding
from broker_embedded.broker import Broker
from broker_embedded.errors import KafkaLogError
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import set_partition_leader_epoch
from broker_embedded.storage.topic_partition import TopicPartition

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def cli_subprocess(
    args: list[str],
    *,
    nofile: int | None = None,
    address_space: int | None = None,
    timeout: float = 300,
) -> tuple[int, str, int]:
    """``kafkalog ARGS`` as a subprocess: exit code, stderr, peak RSS in bytes."""

    def limits() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark_kafkalog.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limits,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise Finding("hang", f"kafkalog {' '.join(args)}: no exit after {timeout} s") from None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the largest child so far
    return proc.returncode, err.decode("utf-8", "replace"), usage.ru_maxrss * 1024


def _judge_exit(code: int, err: str, what: str) -> None:
    if code not in (0, 1) or "Traceback" in err:
        raise Finding("crash", f"{what} exited {code}: {err[-3000:]}")


def bomb(base: Path, *, batches: int = 6, slack_mb: int = 64) -> int:
    """See the module docstring."""
    log_dir = base / "bomb"
    broker = Broker(log_dir, create=True)
    try:
        for topic, count in (("bomb-half", batches // 2), ("bomb", batches)):
            broker.create_topic(topic, 1, config={"retention.ms": -1})
            for _ in range(count):
                b = MemoryRecordsBuilder(0, CompressionType.ZSTD)
                zeros = bytes(MiB)
                for i in range(200):
                    b.append(i, 1_700_000_000_000, None, zeros)
                broker.append(TopicPartition(topic, 0), b.build(), acks=1).raise_error()
    finally:
        broker.close()
    half, many = (_consume_peak(log_dir, topic) for topic in ("bomb-half", "bomb"))
    size = sum(p.stat().st_size for p in (log_dir / "bomb-0").glob("*.log"))
    if many > half + slack_mb * MiB:
        raise Finding(
            "memory",
            f"consume of {batches} zstd batches ({size} bytes on disk, {batches * 200} MiB "
            f"inflated) peaked at {many // MiB} MiB RSS, more than half of them did "
            f"({half // MiB} MiB) and {slack_mb} MiB: memory grows with the data",
        )
    return 1


def _consume_peak(log_dir: Path, topic: str) -> int:
    """Peak RSS of ``kafkalog consume`` reading ``topic`` whole."""
    argv = ["consume", "--log-dir", str(log_dir), "--topic", topic, "--from-beginning"]
    code, err, rss = cli_subprocess([*argv, "--max-messages", "1000000"], address_space=8 << 30)
    _judge_exit(code, err, f"consume of zstd bombs ({topic})")
    return rss


def epoch(target: LogDirTarget) -> int:
    """See the module docstring."""
    tp = TopicPartition(TOPIC, 0)
    last = target.template.segments[tp][-1]
    data = bytearray(last.read_bytes())
    set_partition_leader_epoch(data, 2**31 - 1, 0)
    fresh = target.work.parent / "epoch"
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(target.template.path, fresh)
    (fresh / last.relative_to(target.template.path)).write_bytes(bytes(data))
    (fresh / ".kafka_cleanshutdown").unlink(missing_ok=True)
    code, err, _ = cli_subprocess(["topics", "list", "--log-dir", str(fresh)])
    shutil.rmtree(fresh, ignore_errors=True)
    _judge_exit(code, err, "topics list with leader epoch 2^31-1 in a batch")
    return 1


def open_files(base: Path, partitions: int = 2000, nofile: int = 1024) -> int:
    """See the module docstring."""
    log_dir = base / "many"
    broker = Broker(log_dir, create=True)
    try:
        broker.create_topic("many", partitions, config={"retention.ms": -1})
        for p in range(0, partitions, 7):
            broker.produce("many", p, [b"v"], acks=1)
    finally:
        broker.close()
    code, err, _ = cli_subprocess(["topics", "list", "--log-dir", str(log_dir)], nofile=nofile)
    _judge_exit(code, err, f"topics list of {partitions} partitions under ulimit -n {nofile}")
    if code != 0 and not any(w in err.lower() for w in ("ulimit", "nofile", "limit")):
        raise Finding(
            "crash",
            f"topics list of {partitions} partitions under ulimit -n {nofile}"
            f" fails without naming the limit to raise: {err.strip()[-500:]}",
        )
    return 1


def plain_dir(base: Path) -> int:
    """See the module docstring."""
    plain = base / "plain"
    plain.mkdir(parents=True)
    (plain / "notes.txt").write_text("not a log dir\n")
    tried = 0
    for args in (
        ["topics", "list", "--log-dir", str(plain)],
        ["topics", "describe", "--log-dir", str(plain)],
        ["consume", "--log-dir", str(plain), "--topic", "x"],
        ["dump", str(plain), "--verify"],
    ):
        before = listing(plain)
        code, _, err = run_cli(args)
        tried += 1
        _judge_exit(code, err, " ".join(args[:2]))
        after = listing(plain)
        if after != before:
            raise Finding(
                "wrote",
                f"kafkalog {' '.join(args[:2])} on an ordinary directory "
                f"exits {code} and creates {sorted(after - before)} in it",
            )
    code, _, err = run_cli(["topics", "list", "--log-dir", str(plain / "notes.txt")])
    if code == 0 or "not a directory" not in err:
        raise Finding(
            "crash",
            f"topics list --log-dir FILE exits {code}, says {err.strip()!r}"
            " (expected: not a directory)",
        )
    return tried + 1


def topic_names(base: Path, rng: random.Random, pairs: int = 5) -> int:
    """See the module docstring."""
    broker = Broker(base / "names", create=True)
    tried = 0
    try:
        for i in range(pairs):
            stem = "".join(rng.choice("abc") for _ in range(3)) + str(i)
            first, second = f"{stem}.x", f"{stem}_x"
            if rng.random() < 0.5:
                first, second = second, first
            broker.create_topic(first, 1)
            tried += 1
            try:
                broker.create_topic(second, 1)
            except KafkaLogError:
                continue
            raise Finding(
                "names",
                f"topics {first!r} and {second!r} collide in metrics names "
                "and were both created (Kafka: InvalidTopicException)",
            )
    finally:
        broker.close()
    return tried


def consume_subprocess(target: LogDirTarget, rng: random.Random) -> int:
    """See the module docstring."""
    from benchmarks._fuzz_logdir import mutate_file

    path = target.pick(rng)
    _, mutant = mutate_file(target.template, path, rng)
    fresh = target.work.parent / "sub"
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(target.template.path, fresh)
    (fresh / path.relative_to(target.template.path)).write_bytes(mutant.data)
    tp = target.tp_of(path)
    try:
        code, err, _ = cli_subprocess(
            ["consume", "--log-dir", str(fresh), "--topic", tp.topic, "--from-beginning"],
            timeout=120,
        )
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    _judge_exit(code, err, f"consume subprocess after {mutant.kind} of {path.name}")
    return 1


def temp_base() -> Path:
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="kafkalog-fuzz-", dir=shm if shm.is_dir() else None))


def spark_reads(target: LogDirTarget, rng: random.Random, inputs: int = 4) -> int:
    """See the module docstring: segments that are not the last mutated (no CRC forged), read
    by a Spark batch query of topic ``fz``."""
    from benchmarks._fuzz_logdir import mutate_file

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = str(ROOT)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("kafkalog-fuzz")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    tp = TopicPartition(TOPIC, 0)
    middle = target.template.segments[tp][:-1]
    want = [(r[0], r[1], r[2]) for r in target.template.rows[tp]]
    tried = 0
    try:
        while tried < inputs:
            path = rng.choice(middle)
            seed, mutant = mutate_file(target.template, path, rng)
            boundaries = {p for p, _ in seed.entries}
            if (
                mutant.recrc
                or unprotected(seed, mutant.touched)
                or (mutant.lossy and mutant.kind != "truncate")
                or len(mutant.data) in boundaries
            ):
                continue  # the records may legitimately differ
            tried += 1
            fresh = target.work.parent / "spark"
            shutil.rmtree(fresh, ignore_errors=True)
            shutil.copytree(target.template.path, fresh)
            (fresh / path.relative_to(target.template.path)).write_bytes(mutant.data)
            try:
                got = [
                    (r.offset, r.key, r.value)
                    for r in spark.read.format("kafkalog")
                    .option("subscribe", TOPIC)
                    .load(str(fresh))
                    .select("offset", "key", "value")
                    .orderBy("offset")
                    .collect()
                ]
            except Exception as e:  # the query failed: it must say why
                if path.name not in str(e) and "Corrupt" not in str(e):
                    raise Finding(
                        "unnamed",
                        f"Spark read after {mutant.kind} of {path.name} "
                        f"fails without naming it: {str(e)[:800]}",
                    ) from None
                continue
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
            if got != want:
                raise Finding(
                    "loss",
                    f"Spark read after {mutant.kind} of {path.name} (a "
                    f"segment that is not the last) at {mutant.touched} returned "
                    f"{len(got)} records without an error, the log holds {len(want)}",
                )
    finally:
        spark.stop()
    return tried
