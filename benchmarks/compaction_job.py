"""The scheduled compaction job against the bare cleaner, one process and Spark, in one run.

    .venv/bin/python benchmarks/compaction_job.py [--partitions P] [--size-mb S] [--updates U]
                                                  [--segment-mb G] [--map-mb M] [--repeat R]
                                                  [--master local[2]] [--compile-time]
                                                  [--dir DIR] [--keep]

Builds (under ``benchmarks/.data/``, git-ignored) a log dir through an embedded ``Broker``
(``BrokerConfig(log_cleaner_threads=0)``: nothing cleans it meanwhile): a topic ``bench`` of P
partitions (default 4) with ``cleanup.policy=compact`` and ``segment.bytes`` = G MiB (default
32, so segments roll), each partition about S MiB (default 128) of the records of
``compaction.py``'s generator (K = S MiB / (101 bytes * U) keys of 13 bytes, 132,888 at the
defaults, each updated U times, default 10, in U passes over a random permutation of the keys;
80-byte values; its own seed per partition) produced as prebuilt uncompressed batches of
1,000,000 bytes of records (``columnar_encoder.encode_batches``, ``Broker.produce``); the last
segment of each partition is rolled, so that everything is dirty and cleanable, and the broker
is closed cleanly. A second, small log dir of the same shape (P partitions of 1 MiB) is the
Spark warm-up's.

Then R rounds (``--repeat``, default 3) of (a), (b), (c), interleaved so that a drifting
machine load hits all three alike; each measurement on a fresh copy of that log dir (copied and
``sync``ed before the clock starts), with an offset map of M MiB (default 128, the job's default
``map_memory_per_task``); (a) and (b) each in a new process per measurement, (c) in one process
that holds the SparkSession for all its runs (idle while (a) and (b) run):

- (a) floor: the bare cleaner, in-process: per partition, the log opened as the job opens it
  (``open_log_for_cleaning``, not timed), then a ``SkimpyOffsetMap`` + ``Cleaner`` and
  ``Cleaner.clean`` rounds until the dirty section is done (timed), summed over the partitions;
  no lock, no checkpoint, no planning;
- (b) ``run_local(config, out)``: ``kafkalog compact`` (planning: every log opened and weighed
  under its cleaning lock, then each partition reopened and cleaned under the lock, its
  checkpoint written after each round, the summary printed), one partition after another;
- (c) ``run(spark, config, out)``: the Spark job, one task per partition, on a ``local[2]``
  SparkSession (this machine has 2 cores) whose Python workers run this interpreter. The
  SparkSession's start is not timed (printed apart); one warm-up run of the job on the small
  log dir comes first, so that the Python workers exist, have imported the job and loaded the
  cleaner's numba kernels (each worker process pays that once: printed apart). Timed: the whole
  ``run`` call (planning on the driver, the tasks, collecting the outcomes, the summary).

The numba kernels are loaded before the clock in (a) and (b) as well: what a fresh process pays
for them is printed apart (import + a tiny clean, from numba's cache; ``--compile-time`` adds
the cold compile into an empty cache, tens of seconds). Every output is checked against the
generator's model (one record per key, its last value) after the clock stops.

Printed: per contender the median wall time over the R rounds, MB/s of dirty input
(log bytes before / wall), the ratios (b)/(a) (the job's overhead over the bare cleaner) and
(b)/(c) (Spark's speedup from cleaning partitions in parallel), the log size before and after,
the cleaning rounds, and the peak RSS (VmHWM, restarted when the timed work begins) of the
process that cleans: for (a) and (b) the process itself (for (b): ``kafkalog compact``'s only
process, the driver), for (c) the largest Python worker (the Spark driver does not clean), each
against the offset map bound M. Also the CPU seconds ((c): the Python driver's and workers',
not the JVM's) and the partitions' own cleaning seconds (``PartitionOutcome.seconds``) summed,
which show how much slower a cleaning gets when two run at once. Everything built is deleted
at the end unless ``--keep`` (then a later run with the same shape reuses the built log dirs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import compaction as gen  # noqa: E402  (the generator, log_bytes, check, RSS helpers)

TOPIC = "bench"
BATCH_BYTES = 1_000_000  # records bytes per batch: under the topic's max.message.bytes
WARM_UP_MB = 1
DATA_DIR = HERE / ".data"
BUILT_MARK = "built.json"


# -- the log dirs --------------------------------------------------------------------------------


def keys_for(size_mb: int, updates: int) -> int:
    return max(1, (size_mb << 20) // (gen.RECORD_BYTES * updates))


def build(
    log_dir: Path, partitions: int, keys: int, updates: int, segment_mb: int, seed: int
) -> int:
    """The log dir of the module docstring; returns its ``.log`` bytes."""
    from broker_embedded.broker import Broker
    from broker_embedded.broker_config import BrokerConfig
    from broker_embedded.storage.topic_partition import TopicPartition

    topic_config = {
        "cleanup.policy": "compact",
        "segment.bytes": segment_mb << 20,
        "retention.ms": -1,
        "retention.bytes": -1,
    }
    with Broker(log_dir, config=BrokerConfig(log_cleaner_threads=0), create=True) as broker:
        broker.create_topic(TOPIC, partitions, config=topic_config)
        for p in range(partitions):
            for encoded in gen.encoded_passes(keys, updates, seed + p, max_batch_bytes=BATCH_BYTES):
                for batch in encoded:
                    broker.produce(TOPIC, p, batch, acks=1)
            broker.log_manager.get_log(TopicPartition(TOPIC, p)).roll()
    return dir_bytes(log_dir)


def partition_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.glob(f"{TOPIC}-*") if p.is_dir())


def dir_bytes(log_dir: Path) -> int:
    return sum(gen.log_bytes(d) for d in partition_dirs(log_dir))


def built(
    log_dir: Path, partitions: int, size_mb: int, updates: int, segment_mb: int, seed: int
) -> tuple[int, int, float]:
    """Build ``log_dir`` unless it holds a finished build of this shape; (keys, bytes, seconds)."""
    shape = {
        "partitions": partitions,
        "size_mb": size_mb,
        "updates": updates,
        "segment_mb": segment_mb,
        "seed": seed,
    }
    mark = log_dir.parent / f"{log_dir.name}.{BUILT_MARK}"
    keys = keys_for(size_mb, updates)
    if mark.exists() and log_dir.is_dir() and json.loads(mark.read_text()) == shape:
        return keys, dir_bytes(log_dir), 0.0
    shutil.rmtree(log_dir, ignore_errors=True)
    mark.unlink(missing_ok=True)
    started = time.perf_counter()
    size = build(log_dir, partitions, keys, updates, segment_mb, seed)
    mark.write_text(json.dumps(shape))
    return keys, size, time.perf_counter() - started


def fresh_copy(template: Path, work: Path) -> None:
    """A dirty copy of ``template`` at ``work`` (reflinked where the file system can), synced so
    that the kernel's write-back of the copy does not run during the measurement."""
    shutil.rmtree(work, ignore_errors=True)
    if shutil.which("cp"):
        subprocess.run(["cp", "-a", "--reflink=auto", str(template), str(work)], check=True)
    else:
        shutil.copytree(template, work)
    os.sync()


def verify(work: Path, keys: int, updates: int) -> None:
    for d in partition_dirs(work):
        gen.check(d, keys, updates)


# -- what a fresh process pays for numba -------------------------------------------------------


def numba_load() -> float:
    """Import the cleaner and clean a tiny log (numba kernels from their cache): seconds."""
    started = time.perf_counter()
    from broker_embedded.cleaner.cleaner import Cleaner
    from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
    from broker_embedded.storage.log_config import LogConfig
    from broker_embedded.storage.unified_log import UnifiedLog

    gen._warm_up(Cleaner, SkimpyOffsetMap, UnifiedLog, LogConfig(cleanup_policy="compact"))
    return time.perf_counter() - started


def cold_compile() -> float:
    """The cleaner's kernels compiled into an empty numba cache, in a new process: seconds."""
    code = "import compaction_job as b; print(b.numba_load())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(HERE), str(ROOT)))}
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "NUMBA_CACHE_DIR": cache},
            check=True,
            capture_output=True,
            text=True,
        )
    return float(out.stdout.split()[-1])


# -- the contenders (each in its own process) ----------------------------------------------------


def config_for(log_dir: Path, map_mb: int):  # type: ignore[no-untyped-def]
    from spark_kafkalog.compaction_config import CompactionConfig

    table = {"log_dirs": [str(log_dir)], "topics": [TOPIC], "map_memory_per_task": map_mb << 20}
    return CompactionConfig.from_mapping({"compaction": table}, "bench")


def floor_once(work: Path, map_mb: int) -> dict:
    from broker_embedded.cleaner.cleaner import Cleaner
    from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
    from broker_embedded.storage.log_manager import open_log_for_cleaning
    from broker_embedded.storage.topic_partition import TopicPartition

    wall = cpu = 0.0
    rounds = 0
    before = gen.rss_kib()
    gen.reset_peak()
    for d in partition_dirs(work):
        tp = TopicPartition.try_parse_dir_name(d.name)
        lg = open_log_for_cleaning(work, tp)
        w, c = time.perf_counter(), time.process_time()
        cleaner = Cleaner(SkimpyOffsetMap(map_mb << 20))
        checkpoint = None
        while True:
            result = cleaner.clean(lg, checkpoint)
            if not result.cleaned:
                break
            rounds += 1
            checkpoint = result.end_offset
            if not result.map_full or result.end_offset >= result.first_uncleanable_offset:
                break
        wall += time.perf_counter() - w
        cpu += time.process_time() - c
        del cleaner
        lg.close()
    return {
        "wall": wall,
        "cpu": cpu,
        "rounds": rounds,
        "rss_before_kib": before,
        "peak_kib": gen.peak_kib(),
    }


def local_once(work: Path, map_mb: int) -> dict:
    from spark_kafkalog.compaction_job import run_local

    config = config_for(work, map_mb)
    out = io.StringIO()
    before = gen.rss_kib()
    gen.reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    report = run_local(config, out)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "wall": wall,
        "cpu": cpu,
        **job_facts(report, out),
        "rss_before_kib": before,
        "peak_kib": gen.peak_kib(),
    }


def job_facts(report, out: io.StringIO) -> dict:  # type: ignore[no-untyped-def]
    statuses = sorted({o.status for o in report.outcomes})
    if report.exit_code != 0 or statuses != ["cleaned"]:
        raise AssertionError(f"the job did not clean every partition:\n{out.getvalue()}")
    seconds = [o.seconds for o in report.outcomes]
    return {
        "rounds": sum(o.rounds for o in report.outcomes),
        "partition_seconds": sum(seconds),
        "slowest_partition": max(seconds),
        "summary": out.getvalue(),
    }


def python_workers() -> set[int]:
    """The Python workers among this process's descendants: the processes that the PySpark
    daemon (``python -m pyspark.daemon``, itself a child of the JVM) forked."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    daemons = set()
    for pid in parents:
        try:
            if b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes() and descends(pid):
                daemons.add(pid)
        except OSError:
            pass
    return {pid for pid in daemons if parents.get(pid) in daemons}


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (those still running)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def worker_peaks(workers: set[int], reset: bool) -> int:
    """The largest VmHWM (KiB) of ``workers``; with ``reset``, restart them first."""
    peak = 0
    for pid in workers:
        try:
            if reset:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
    return peak


def serve_spark(args: argparse.Namespace) -> None:
    """Start Spark, warm it up, then one timed ``run`` per ``run`` line on stdin."""
    from _spark_common import start_spark

    from spark_kafkalog.compaction_job import run

    started = time.perf_counter()
    spark = start_spark("compaction-job-bench", args.master, args.partitions, "1g", "ERROR")
    facts: dict = {"spark_start": time.perf_counter() - started}
    try:
        warm = args.dir / "work-spark-warm-up"
        fresh_copy(args.warm_template, warm)
        out = io.StringIO()
        started = time.perf_counter()
        job_facts(run(spark, config_for(warm, args.map_mb), out), out)
        facts["warm_up"] = time.perf_counter() - started
        warm_workers = python_workers()
        facts["workers"] = len(warm_workers)
        shutil.rmtree(warm)
        reply(facts)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            fresh_copy(args.template, args.work)
            before = python_workers()
            worker_peaks(before, reset=True)
            out = io.StringIO()
            cpu = cpu_seconds(before) + time.process_time()
            wall = time.perf_counter()
            report = run(spark, config_for(args.work, args.map_mb), out)
            wall = time.perf_counter() - wall
            workers = python_workers()
            cpu = cpu_seconds(workers) + time.process_time() - cpu
            r = {"wall": wall, "cpu": cpu, **job_facts(report, out)}
            r["peak_kib"] = worker_peaks(workers, reset=False)
            r["new_workers"] = len(workers - warm_workers)  # each paid the numba load in the run
            reply(finish(args, r))
    finally:
        spark.stop()


REPLY = "@@ "


def reply(data: dict) -> None:
    print(REPLY + json.dumps(data), flush=True)


def finish(args: argparse.Namespace, r: dict) -> dict:
    """The measurement ``r`` with the size after, once the output is checked; the copy goes."""
    r["after"] = dir_bytes(args.work)
    verify(args.work, args.keys, args.updates)
    shutil.rmtree(args.work)
    return r


def child(args: argparse.Namespace) -> None:
    if args.child == "spark":
        serve_spark(args)
        return
    loaded = numba_load()
    if args.child == "local":  # the job's own modules too, as (a) has the cleaner's
        import spark_kafkalog.compaction_job  # noqa: F401
    once = floor_once if args.child == "floor" else local_once
    fresh_copy(args.template, args.work)
    reply({**finish(args, once(args.work, args.map_mb)), "numba_load": loaded})


def child_command(kind: str, args: argparse.Namespace, keys: int) -> list[str]:
    cmd = [sys.executable, __file__, "--child", kind, "--work", str(args.dir / f"work-{kind}")]
    cmd += ["--keys", str(keys), "--dir", str(args.dir)]
    for name in ("template", "warm_template", "partitions", "updates", "map_mb", "master"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return cmd


def read_reply(proc: subprocess.Popen, kind: str, errors) -> dict:  # type: ignore[no-untyped-def]
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith(REPLY):
            return json.loads(line[len(REPLY) :])
    proc.wait()
    errors.seek(0)
    sys.stderr.write(errors.read()[-20_000:])
    raise SystemExit(f"{kind} failed (exit {proc.returncode})")


def measure(kind: str, args: argparse.Namespace, keys: int) -> dict:
    """One measurement of (a) or (b) in a new process."""
    with tempfile.TemporaryFile("w+") as errors:
        with subprocess.Popen(
            child_command(kind, args, keys), stdout=subprocess.PIPE, stderr=errors, text=True
        ) as proc:
            return read_reply(proc, kind, errors)


# -- the harness ---------------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--size-mb", type=int, default=128, help="MiB per partition")
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--segment-mb", type=int, default=32)
    ap.add_argument("--map-mb", type=int, default=128, help="map_memory_per_task, MiB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile-time", action="store_true", help="also time numba's cold compile")
    ap.add_argument("--dir", type=Path, default=DATA_DIR / "compaction_job")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the built log dirs")
    for hidden in ("--child", "--template", "--warm-template", "--work", "--keys"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.dir = args.dir.resolve()
    if args.child:
        for name in ("template", "warm_template", "work"):
            setattr(args, name, Path(getattr(args, name)))
        args.keys = int(args.keys)
        child(args)
        return

    args.dir.mkdir(parents=True, exist_ok=True)
    args.load_before = os.getloadavg()[0]
    template, warm = args.dir / "template", args.dir / "warm-up-template"
    args.template, args.warm_template = template, warm
    try:
        keys, size, seconds = built(
            template, args.partitions, args.size_mb, args.updates, args.segment_mb, args.seed
        )
        built(warm, args.partitions, WARM_UP_MB, args.updates, args.segment_mb, args.seed + 1000)
        how = f"built in {seconds:.0f} s" if seconds else "reused (--keep)"
        print(
            f"log dir: {args.partitions} partitions, {size / 1e6:.0f} MB, {keys:,} keys x "
            f"{args.updates} updates per partition, segments of {args.segment_mb} MiB; "
            f"{how}",
            flush=True,
        )
        runs: dict[str, list[dict]] = {"floor": [], "local": [], "spark": []}
        with tempfile.TemporaryFile("w+") as errors:
            spark = subprocess.Popen(
                child_command("spark", args, keys),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
            try:
                facts = read_reply(spark, "spark", errors)
                for i in range(args.repeat):  # interleaved: a drifting load hits all alike
                    runs["floor"].append(measure("floor", args, keys))
                    runs["local"].append(measure("local", args, keys))
                    spark.stdin.write("run\n")  # type: ignore[union-attr]
                    spark.stdin.flush()  # type: ignore[union-attr]
                    runs["spark"].append(read_reply(spark, "spark", errors))
                    walls = ", ".join(f"{k} {v[-1]['wall']:.2f} s" for k, v in runs.items())
                    print(f"run {i + 1}/{args.repeat}: {walls}", flush=True)
            finally:
                with contextlib.suppress(OSError):
                    spark.stdin.close()  # type: ignore[union-attr]
                spark.wait()
        cold = cold_compile() if args.compile_time else None
    finally:
        if not args.keep:
            for path in (template, warm):
                shutil.rmtree(path, ignore_errors=True)
                (path.parent / f"{path.name}.{BUILT_MARK}").unlink(missing_ok=True)
        for path in args.dir.glob("work-*"):
            shutil.rmtree(path, ignore_errors=True)
        if not args.keep and not any(args.dir.iterdir()):
            args.dir.rmdir()
    report(args, keys, size, facts, cold, runs)


def report(args, keys, size, spark, cold, runs) -> None:  # type: ignore[no-untyped-def]
    med = {k: statistics.median(r["wall"] for r in v) for k, v in runs.items()}
    cached = statistics.median(r["numba_load"] for r in runs["floor"] + runs["local"])
    first = {k: v[0] for k, v in runs.items()}
    map_mib = args.map_mb
    compiled = f", cold compile {cold:.1f} s" if cold is not None else ""
    from _spark_common import cpu_model

    print()
    print(
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), 1-minute load average "
        f"{args.load_before:.2f} before, {os.getloadavg()[0]:.2f} after; offset map "
        f"{map_mib} MiB per task; median of "
        f"{args.repeat} run(s), each on a fresh copy (page cache warm, synced)"
    )
    print(
        f"Log: {args.partitions} partitions x {size / args.partitions / 1e6:.0f} MB = "
        f"{size / 1e6:.0f} MB dirty ({keys:,} keys x {args.updates} updates a partition)"
    )
    print()
    print(
        "| contender | wall s | MB/s dirty input | wall / (a)'s | speedup over (b) "
        "| size before MB | size after MB | rounds "
        "| cleaning process peak RSS MiB (work: peak - before) | map bound MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    names = {
        "floor": "(a) bare cleaner, in-process, partitions summed",
        "local": "(b) run_local (kafkalog compact)",
        "spark": f"(c) run, Spark {args.master}",
    }
    for kind, label in names.items():
        r = first[kind]
        if kind == "spark":
            memory = f"{mib(r['peak_kib'])} (largest Python worker)"
        else:
            memory = (
                f"{mib(r['peak_kib'])} ({mib(r['peak_kib'] - r['rss_before_kib'])}; "
                f"{mib(r['rss_before_kib'])} before)"
            )
        print(
            f"| {label} | {med[kind]:.2f} | {size / 1e6 / med[kind]:.0f} | "
            f"{med[kind] / med['floor']:.2f}x | {med['local'] / med[kind]:.2f}x | "
            f"{size / 1e6:.0f} | {r['after'] / 1e6:.1f} | {r['rounds']} | {memory} | "
            f"{map_mib} |"
        )
    print()
    cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in runs.items()}
    print(
        f"(b) / (a): {med['local'] / med['floor']:.2f}x the wall time, "
        f"{cpu['local'] / cpu['floor']:.2f}x the CPU time ({cpu['floor']:.2f} s -> "
        f"{cpu['local']:.2f} s; MB/s per core {size / 1e6 / cpu['floor']:.0f} -> "
        f"{size / 1e6 / cpu['local']:.0f})"
    )
    print(
        f"(c) vs (b): speedup {med['local'] / med['spark']:.2f}x with {args.master} "
        f"({med['floor'] / med['spark']:.2f}x the floor's speed); CPU of the Python driver and "
        f"workers {cpu['spark']:.2f} s ({cpu['spark'] / cpu['local']:.2f}x (b)'s; the JVM's "
        "not counted)"
    )
    part = {
        k: statistics.median(r["partition_seconds"] for r in runs[k]) for k in ("local", "spark")
    }
    slowest = statistics.median(r["slowest_partition"] for r in runs["spark"])
    print(
        f"Partition cleanings (clean_partition's seconds, summed): (b) {part['local']:.2f} s, "
        f"(c) {part['spark']:.2f} s ({part['spark'] / part['local']:.2f}x: each cleaning is "
        f"slower with two at a time), the slowest {slowest:.2f} s"
    )
    new = sum(r["new_workers"] for r in runs["spark"])
    if new:
        print(f"{new} Python worker(s) started during the timed Spark runs (numba load timed)")
    print(
        f"Not timed: SparkSession start {spark['spark_start']:.1f} s; the warm-up run of the "
        f"job on {args.partitions} x {WARM_UP_MB} MB ({spark['workers']} Python workers "
        f"started, each importing the job and loading the kernels) {spark['warm_up']:.1f} s; "
        f"numba kernels in a fresh process (import + a tiny clean, from the cache) "
        f"{cached:.2f} s{compiled}"
    )
    print()
    print("run_local's summary (first run):")
    for line in first["local"]["summary"].rstrip().splitlines():
        print(f"    {line}")


if __name__ == "__main__":
    main()
