"""The compaction job's report for schedulers (spark_kafkalog/compaction_report.py): the JSON
written by ``--report`` after Spark runs on real log dirs, compared field by field with what the
log dirs hold (segment sizes, the keys produced), and each exit status: 0 done, 1 a partition
failed, 2 bad configuration or usage, 3 the time budget ran out with work left, 4 a bug."""

from __future__ import annotations

import io
import json
import re
import socket
from pathlib import Path

import crc32c
import pytest

from spark_kafkalog.compaction_job import (
    BUDGET_USED,
    PARTIAL,
    PartitionOutcome,
    exit_status,
    run,
)
from spark_kafkalog.compaction_report import execute

from ._compaction_logdirs import SEGMENT_GLOB, TopicModel, build_compacted

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
VOLATILE = ("run_id", "host", "started", "finished", "seconds")


def write_config(path: Path, log_dir: Path, **values) -> Path:
    lines = [f'log_dirs = ["{log_dir}"]'] + [f"{k} = {v!r}" for k, v in values.items()]
    path.write_text("[compaction]\n" + "\n".join(lines) + "\n")
    return path


def log_bytes(log_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (log_dir / f"{topic}-{partition}").glob(SEGMENT_GLOB))


def dirty_keys(log_dir: Path, model: TopicModel, partition: int) -> int:
    """Distinct keys below the active segment (what one round's offset map holds)."""
    active = max(int(f.name[:20]) for f in (log_dir / f"profiles-{partition}").glob(SEGMENT_GLOB))
    return len({k for o, k, _ in model.records[partition] if o < active})


def spark_job(spark, out: io.StringIO):
    return lambda config: run(spark, config, out)


def read_report(path: Path) -> tuple[dict, dict]:
    """The report, and its run-dependent fields (checked for form) taken out of it."""
    report = json.loads(path.read_text())
    volatile = {k: report.pop(k) for k in VOLATILE}
    assert re.fullmatch(TIME, volatile["started"]) and re.fullmatch(TIME, volatile["finished"])
    assert volatile["started"] <= volatile["finished"]
    assert volatile["host"] == socket.gethostname()
    assert not list(path.parent.glob(f".{path.name}.tmp-*"))
    return report, volatile


def test_a_clean_spark_run_reports_every_partition_and_exits_0(spark, tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    model, _ = build_compacted(log_dir, partitions=2, batches=40)
    before = [log_bytes(log_dir, "profiles", p) for p in range(2)]
    keys = [dirty_keys(log_dir, model, p) for p in range(2)]
    report_file = tmp_path / "report.json"
    out = io.StringIO()
    status = execute(write_config(tmp_path / "c.toml", log_dir), report_file, spark_job(spark, out))
    assert status == 0, out.getvalue()
    report, volatile = read_report(report_file)
    after = [log_bytes(log_dir, "profiles", p) for p in range(2)]
    assert after[0] < before[0] and after[1] < before[1]
    partitions = [
        {
            "log_dir": str(log_dir),
            "topic": "profiles",
            "partition": p,
            "status": "cleaned",
            "reason": "",
            "bytes_before": before[p],
            "bytes_after": after[p],
            "dirty_ratio": 1.0,
            "keys": keys[p],
            "rounds": 1,
        }
        for p in range(2)
    ]
    seconds = [p.pop("seconds") for p in report["partitions"]]
    assert all(isinstance(s, float) and s > 0 for s in seconds)
    assert report == {
        "format": 1,
        "dry_run": False,
        "exit_status": 0,
        "error": None,
        "totals": {
            "cleaned": 2,
            "partial": 0,
            "skipped": 0,
            "failed": 0,
            "to_clean": 0,
            "bytes_before": sum(before),
            "bytes_after": sum(after),
            "keys": sum(keys),
            "rounds": 2,
        },
        "partitions": partitions,
    }
    assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{8}", volatile["run_id"])
    assert f"kafkalog compaction run {volatile['run_id']} " in out.getvalue()
    # a rerun replaces the report: nothing to do, still 0
    assert execute(tmp_path / "c.toml", report_file, spark_job(spark, io.StringIO())) == 0
    again, volatile_again = read_report(report_file)
    assert volatile_again["run_id"] != volatile["run_id"]
    reason = "nothing cleanable (all clean, or dirty only in the active segment)"
    rows = [
        (p["status"], p["reason"], p["bytes_before"], p["bytes_after"], p["keys"])
        for p in again["partitions"]
    ]
    assert rows == [("skipped", reason, a, a, 0) for a in after]


def test_a_corrupt_partition_exits_1_and_its_row_says_why(spark, tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    build_compacted(log_dir, partitions=2, batches=40, extra_topics=False)
    first = sorted((log_dir / "profiles-1").glob(SEGMENT_GLOB))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    before = log_bytes(log_dir, "profiles", 1)
    report_file = tmp_path / "r.json"
    status = execute(
        write_config(tmp_path / "c.toml", log_dir), report_file, spark_job(spark, io.StringIO())
    )
    assert status == 1
    report, _ = read_report(report_file)
    assert (report["exit_status"], report["error"]) == (1, None)
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "failed"]
    failed = report["partitions"][1]
    length = int.from_bytes(data[8:12], "big")  # the batch after its offset and length
    stored = int.from_bytes(data[17:21], "big")
    computed = crc32c.crc32c(bytes(data[21 : 12 + length]))  # an independent CRC-32C
    assert failed["reason"] == (
        f"CorruptRecordError: corrupt record data in {first} at byte 0 (batch base offset 0): "
        f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
    )
    assert (failed["bytes_before"], failed["bytes_after"], failed["keys"], failed["rounds"]) == (
        0,
        0,
        0,
        0,
    )
    assert log_bytes(log_dir, "profiles", 1) == before
    assert report["totals"]["failed"] == 1 and report["totals"]["cleaned"] == 1


def test_a_spent_time_budget_exits_3(spark, tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    build_compacted(log_dir, partitions=2, batches=40, extra_topics=False)
    config = write_config(tmp_path / "c.toml", log_dir, time_budget_seconds=1e-6)
    report_file = tmp_path / "r.json"
    assert execute(config, report_file, spark_job(spark, io.StringIO())) == 3
    report, _ = read_report(report_file)
    assert report["exit_status"] == 3
    assert [
        (p["partition"], p["status"], p["reason"], p["rounds"]) for p in report["partitions"]
    ] == [(0, "skipped", BUDGET_USED, 0), (1, "skipped", BUDGET_USED, 0)]


def test_work_left_is_3_and_a_failure_wins() -> None:
    def o(status: str, reason: str = "") -> PartitionOutcome:
        return PartitionOutcome("d", "t", 0, status, reason)

    assert exit_status([o("cleaned"), o("skipped", "nothing cleanable")]) == 0
    assert exit_status([o("cleaned"), o(PARTIAL, "the time budget ran out after round 2")]) == 3
    assert exit_status([o("skipped", BUDGET_USED)]) == 3
    assert exit_status([o("skipped", BUDGET_USED), o("failed", "x")]) == 1
    assert exit_status([]) == 0


def test_bad_configuration_and_usage_exit_2_with_a_report(cli, tmp_path: Path) -> None:
    report_file = tmp_path / "r.json"
    bad = tmp_path / "bad.toml"
    bad.write_text("[compaction]\nlog_dirs = ['x']\nmapMemory = 1\n")
    code, out, err = cli(f"compact --config {bad} --report {report_file}")
    assert (code, out) == (2, "")
    message = (
        f"{bad}: unknown compaction config 'mapMemory' (known: broker_config, "
        "load_factor, lock_wait_seconds, log_dirs, map_memory_per_task, "
        "min_cleanable_dirty_ratio, progress_interval_seconds, time_budget_seconds, "
        "topics)"
    )
    assert err == f"kafkalog compact: {message}\n"
    report, _ = read_report(report_file)
    assert report == {
        "format": 1,
        "dry_run": False,
        "exit_status": 2,
        "error": message,
        "totals": None,
        "partitions": [],
    }
    nowhere = tmp_path / "no" / "r.json"
    code, _, err = cli(f"compact --config {bad} --report {nowhere}")
    assert (code, err) == (
        2,
        f"kafkalog compact: --report {nowhere}: its directory does not exist\n",
    )
    with pytest.raises(SystemExit) as usage:
        cli("compact --reprot x")
    assert usage.value.code == 2


def test_an_unexpected_error_exits_4_with_one_line(tmp_path: Path, capsys) -> None:
    def broken(config):
        raise RuntimeError("boom")

    config = write_config(tmp_path / "c.toml", tmp_path)
    assert execute(config, tmp_path / "r.json", broken, "compact") == 4
    err = capsys.readouterr().err
    assert err == (
        "compact: unexpected RuntimeError: boom (a bug in kafkalog; --log-level debug "
        "shows the traceback)\n"
    )
    assert json.loads((tmp_path / "r.json").read_text())["exit_status"] == 4
