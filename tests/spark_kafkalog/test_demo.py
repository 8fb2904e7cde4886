"""The main job (``spark_kafkalog.demo``) end to end on a small size, its printed figures checked
against independent counts: the seeded generator's records counted here, kafka-python's
murmur2 for the placement, and kafka-python's decoder over the ``.log`` files Spark wrote and
the compaction job left."""

from __future__ import annotations

import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2
from kafka.record.memory_records import MemoryRecords

from spark_kafkalog import cli, demo, kernel_cache
from spark_kafkalog.compaction_job import CLEANED

EVENTS = 6_000
ROOT = Path(__file__).resolve().parents[2]
SEED = 7


def kafka_python_records(log_dir: Path, topic: str) -> dict[int, list]:
    """Every record of every partition of ``topic``, decoded by kafka-python from the files."""
    out: dict[int, list] = {}
    for part_dir in sorted(log_dir.glob(f"{topic}-*")):
        records = []
        for seg in sorted(part_dir.glob("*.log")):
            batches = MemoryRecords(seg.read_bytes())
            while (batch := batches.next_batch()) is not None:
                records += list(batch)
        out[int(part_dir.name.rsplit("-", 1)[1])] = records
    return out


def partition_of(key: bytes) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % demo.PARTITIONS


def numba_cache_files() -> dict[Path, int]:
    """Every file of numba's on-disk cache of the project's kernels, with its mtime (ns)."""
    where = os.environ.get("NUMBA_CACHE_DIR")
    roots = [Path(where)] if where else [ROOT / "broker_embedded", ROOT / "datasource"]
    return {f: f.stat().st_mtime_ns for r in roots for f in r.rglob("*.nb[ic]")}


@pytest.fixture(scope="module")
def cached_before() -> dict[Path, int]:
    """numba's cache once the warm-up has run (as ``bash dev.sh`` and the demo run it)."""
    kernel_cache.ensure_compiled(check=True)
    return numba_cache_files()


@pytest.fixture(scope="module")
def ran(spark, tmp_path_factory, cached_before) -> tuple[demo.DemoResult, str, Path]:
    log_dir = tmp_path_factory.mktemp("demo") / "logdir"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\n")  # an earlier run's log dir
    (log_dir / "left-over").write_text("from an earlier run")
    out = io.StringIO()
    res = demo.run_demo(log_dir, out, events=EVENTS, seed=SEED, spark=spark)
    return res, out.getvalue(), log_dir


def test_no_kernel_is_compiled_after_the_warm_up(cached_before, ran) -> None:
    """``kernel_cache.ensure_compiled`` compiled every signature the demo's processes use (the
    driver's and Spark's Python workers'): none wrote numba's cache during the demo. (The first
    test of the module: it runs right after the demo.)"""
    written = sorted(str(f) for f, t in numba_cache_files().items() if cached_before.get(f) != t)
    assert written == []


@pytest.fixture(scope="module")
def generated() -> tuple[demo.Events, demo.Profiles]:
    return demo.generate_events(EVENTS, SEED), demo.generate_profiles(demo.users_for(EVENTS), SEED)


def test_the_log_dir_is_recreated(ran) -> None:
    _, _, log_dir = ran
    assert not (log_dir / "left-over").exists()
    assert {p.name.rsplit("-", 1)[0] for p in log_dir.glob("*-[0-9]*")} == {
        "events",
        "profiles",
        "purchases",
        "enriched",
    }


def test_a_directory_that_is_not_a_log_dir_is_never_deleted(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a Kafka log dir"):
        demo.recreate(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert demo.recreate(tmp_path / "new").is_dir()


def test_events_by_type_and_partition(ran, generated) -> None:
    res, text, _ = ran
    events, _ = generated
    by_type = Counter(demo.EVENT_TYPES[t] for t in events.types.tolist())
    assert res.by_type == dict(by_type) and sum(by_type.values()) == EVENTS
    assert res.revenue_cents == int(events.amounts.sum()) > 0
    by_partition = Counter(partition_of(k) for k in events.keys.to_pylist())
    assert res.by_partition == dict(by_partition)
    for kind, n in by_type.items():
        assert f"    {kind:<12} {n:>9,}" in text
    assert f"    total        {EVENTS:>9,} {demo._money(res.revenue_cents):>14}\n" in text


def test_timestamp_range(ran, generated) -> None:
    res, text, _ = ran
    events, _ = generated
    lo, hi = (demo.START_MS + m * 60_000 for m in demo.RANGE_MINUTES)
    ts = events.timestamps
    assert res.range_events == int(((ts >= lo) & (ts < hi)).sum()) > 0
    assert f"    {res.range_events:,} events, first at 00:15:" in text
    # each partition's range is contiguous: its events in time order, as produced
    parts = [partition_of(k) for k in events.keys.to_pylist()]
    for p, (first, last) in res.range_offsets.items():
        in_p = [t for t, q in zip(ts.tolist(), parts, strict=True) if q == p]
        assert first == sum(t < lo for t in in_p) and last == sum(t < hi for t in in_p) - 1


def test_latest_profiles(ran, generated) -> None:
    res, text, _ = ran
    _, profiles = generated
    latest: dict[bytes, bytes | None] = {}
    for k, v in zip(profiles.keys, profiles.values, strict=True):
        latest[k] = v
    live = [json.loads(v)["tier"] for v in latest.values() if v is not None]
    assert res.profiles_live == len(live) and res.profiles_deleted == len(latest) - len(live)
    assert res.profiles_deleted > 0
    assert res.live_by_tier == dict(Counter(live))
    assert f"{len(profiles.keys):,} updates -> {len(latest):,} users: {len(live):,} live" in text


def expected_profiles_segments(profiles: demo.Profiles) -> dict[int, list[int]]:
    """Partition -> the base offsets of its profiles segments, as produced: a batch per
    partition and minute, a roll when a batch's max timestamp is more than segment.ms past the
    segment's first batch's (Kafka's time-based roll; the batches are far below 16 KiB here)."""
    rows: dict[int, list[int]] = {}
    for k, ts in zip(profiles.keys, profiles.timestamps.tolist(), strict=True):
        rows.setdefault(partition_of(k), []).append(ts)
    bases: dict[int, list[int]] = {}
    for p, stamps in rows.items():
        batches: dict[int, list[int]] = {}
        offset = 0
        for ts in stamps:
            batches.setdefault(ts // demo.PROFILES_LINGER_MS, []).append(offset)
            offset += 1
        first_max = None
        for minute in sorted(batches):
            offsets = batches[minute]
            batch_max = max(stamps[o] for o in offsets)
            if first_max is None or batch_max - first_max > demo.PROFILES_SEGMENT_MS:
                bases.setdefault(p, []).append(offsets[0])
                first_max = batch_max
    return bases


def test_compaction_step(ran, generated) -> None:
    """The profiles topic before and after the compaction job, against the generator: every
    record before; after, the latest record of each key below the active segment and every
    record of the active segment (kafka-python decodes the files the job left); Spark's latest
    value per key identical before and after; sizes equal to the files' and the job's."""
    res, text, log_dir = ran
    _, profiles = generated
    latest = demo.latest_profiles(profiles)
    tombstones = sum(v is None for v in latest.values())
    bases = expected_profiles_segments(profiles)
    assert all(len(b) >= 3 for b in bases.values())  # compaction has segments to clean
    produced: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    for k, v in zip(profiles.keys, profiles.values, strict=True):
        rows = produced.setdefault(partition_of(k), [])
        rows.append((len(rows), k, v))
    expected_after: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    cleanable_keys = {}
    for p, rows in produced.items():
        active = bases[p][-1]
        last = {k: o for o, k, _ in rows if o < active}
        cleanable_keys[p] = len(last)
        expected_after[p] = [(o, k, v) for o, k, v in rows if o >= active or last[k] == o]

    on_disk = kafka_python_records(log_dir, "profiles")
    assert {p: [(r.offset, r.key, r.value) for r in rs] for p, rs in on_disk.items()} == (
        expected_after
    )
    files = list(log_dir.glob("profiles-*/*.log"))
    assert {
        p: sorted(int(f.stem) for f in files if f.parent.name == f"profiles-{p}") for p in produced
    } == {p: [0, b[-1]] for p, b in bases.items()}

    before, after = res.compaction_before, res.compaction_after
    records_after = sum(len(r) for r in expected_after.values())
    assert before == demo.TopicFigures(
        sum(len(b) for b in bases.values()),
        before.bytes,
        len(profiles.keys),
        len(latest),
        tombstones,
    )
    assert after == demo.TopicFigures(
        2 * demo.PARTITIONS,  # the cleaned segments of a partition fit one group, + the active
        sum(f.stat().st_size for f in files),
        records_after,
        len(latest),
        tombstones,
    )
    assert after.bytes < before.bytes and records_after < len(profiles.keys)
    assert res.latest_missing == res.latest_extra == 0

    outcomes = {o.partition: o for o in res.compaction_outcomes}
    assert sorted(outcomes) == list(range(demo.PARTITIONS)) and res.compaction_exit_code == 0
    assert {p: (o.topic, o.status, o.rounds, o.keys) for p, o in outcomes.items()} == {
        p: ("profiles", CLEANED, 1, n) for p, n in cleanable_keys.items()
    }
    assert sum(o.bytes_before for o in outcomes.values()) == before.bytes
    assert sum(o.bytes_after for o in outcomes.values()) == after.bytes

    segments, size = before.segments, before.bytes
    assert (
        f"    before {segments} segments, {size:,} bytes, {len(profiles.keys):,} records; "
        f"latest per key: {len(latest):,} keys, {tombstones:,} tombstones\n"
    ) in text
    w = [len(f"{n:,}") for n in (segments, size, len(profiles.keys))]
    assert (
        f"    after  {2 * demo.PARTITIONS:>{w[0]}} segments, {after.bytes:>{w[1]},} bytes, "
        f"{records_after:>{w[2]},} records; latest per key: {len(latest):,} keys, "
        f"{tombstones:,} tombstones\n"
    ) in text
    assert (
        f"    {1 - after.bytes / size:.0%} fewer bytes, "
        f"{1 - records_after / len(profiles.keys):.0%} fewer records"
    ) in text
    for p in range(demo.PARTITIONS):
        assert re.search(rf"\n      \S+  profiles-{p}  cleaned  ", text)
    assert "      cleaned 3, partial 0, skipped 0, failed 0: " in text
    assert (
        "    [4]'s latest per key vs. the same read after: exceptAll both ways 0 and 0 rows: "
        "identical\n"
    ) in text


def test_written_topic_equals_the_purchases(ran, generated) -> None:
    """kafka-python reads the purchases topic that Spark wrote: every purchase once, in the
    partition of its key, with its amount and its headers."""
    res, text, log_dir = ran
    events, profiles = generated
    purchase = demo.EVENT_TYPES.index("purchase")
    expected = Counter(
        (k, int(a))
        for k, t, a in zip(events.keys.to_pylist(), events.types, events.amounts, strict=True)
        if t == purchase
    )
    written = kafka_python_records(log_dir, "purchases")
    got: Counter[tuple[bytes, int]] = Counter()
    for p, records in written.items():
        for r in records:
            assert partition_of(r.key) == p
            assert [h[0] for h in r.headers] == ["source", "trace-id"]
            got[(r.key, json.loads(r.value)["amount_cents"])] += 1
    assert got == expected
    total = sum(a for (_, a), n in expected.items() for _ in range(n))
    assert res.purchases_read == sum(expected.values()) == res.by_type["purchase"]
    assert res.purchases_revenue_cents == total == res.revenue_cents
    assert res.purchases_by_partition == {p: len(r) for p, r in written.items() if r}
    assert f"read back: {res.purchases_read:,} records" in text
    assert "(join with [4])" in text  # the profiles step, numbered without a session step
    tiers: dict[bytes, str] = {}
    for k, v in zip(profiles.keys, profiles.values, strict=True):
        tiers[k] = demo.NO_TIER if v is None else json.loads(v)["tier"]
    by_tier: Counter[str] = Counter()
    for (k, a), n in expected.items():
        by_tier[tiers.get(k, demo.NO_TIER)] += a * n
    assert res.revenue_by_tier == {t: c for t, c in by_tier.items() if c}


def test_streaming_step_drains_in_micro_batches_exactly_once(ran) -> None:
    res, text, _ = ran
    limit = res.events // 3
    assert len(res.stream_batches) >= 3 and max(res.stream_batches) <= limit
    assert sum(res.stream_batches) == res.events == res.enriched_read
    assert f"enriched read back: {res.events:,} records" in text


def test_summary_and_timings(ran) -> None:
    res, text, _ = ran
    assert set(res.timings) == {
        "produce",
        "aggregate",
        "range",
        "profiles",
        "compact",
        "write",
        "stream",
        "total",
    }
    assert any(line.startswith("Summary: ") for line in text.splitlines()[-4:])
    assert f"Total {res.timings['total']:.1f} s." in text


def test_cli_demo_runs_the_main_job(spark, tmp_path: Path, capsys) -> None:
    """``kafkalog demo --dir D --events N`` (in this process: it uses the active session)."""
    assert cli.main(["demo", "--dir", str(tmp_path / "demo"), "--events", "3000"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: int(line.split()[1].replace(",", ""))
        for line in out.splitlines()
        if line.startswith("    ")
        and len(line.split()) >= 2
        and line.split()[0] in (*demo.EVENT_TYPES, "total")
    }
    assert rows["total"] == 3000 == sum(v for k, v in rows.items() if k != "total")
    assert f"read back: {rows['purchase']:,} records" in out
    assert any(line.startswith("Summary: ") for line in out.splitlines()[-4:])
    assert sorted(p.name for p in (tmp_path / "demo").glob("purchases-*")) == [
        "purchases-0",
        "purchases-1",
        "purchases-2",
    ]
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session lives on


def test_cli_demo_refuses_a_directory_that_is_not_a_log_dir(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert cli.main(["demo", "--dir", str(tmp_path)]) == 1
    assert "not a Kafka log dir" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").exists()
