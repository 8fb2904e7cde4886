"""The compaction job's contract with schedulers (cron, Airflow): its command line arguments,
its exit status and its JSON report (``--report FILE``), shared by ``spark-submit
jobs/compact.py`` and ``kafkalog compact``.

Exit status: compaction_job.py's module docstring (0 done, 1 a partition failed or the job could
not run, 2 bad configuration or usage, 3 work left, 4 a bug).

The report (format 1) is one JSON object, written whenever the command line parsed, also when
the job could not run (then ``error`` says why, ``run_id`` and ``totals`` are null and
``partitions`` is empty)::

    {"format": 1, "run_id": "20261125T061500-1a2b3c4d", "host": "...",
     "started": "2026-11-25T06:15:00.123Z", "finished": "...", "seconds": 12.5,
     "dry_run": false, "exit_status": 0, "error": null,
     "totals": {"cleaned": 2, "partial": 0, "skipped": 1, "failed": 0, "to_clean": 0,
                "bytes_before": 1000, "bytes_after": 400, "keys": 300, "rounds": 2},
     "partitions": [{"log_dir": "/data/d", "topic": "t", "partition": 0, "status": "cleaned",
                     "reason": "", "bytes_before": 500, "bytes_after": 200,
                     "dirty_ratio": 0.83, "keys": 150, "rounds": 1, "seconds": 0.4}, ...]}

Times are UTC (ISO 8601, milliseconds, ``Z``); ``seconds`` are floats. ``partitions`` are in
log dir, topic, partition order; ``status`` is ``cleaned``, ``partial``, ``skipped``, ``failed``
or, with ``dry_run``, ``to clean`` (then ``bytes_after``, ``keys``, ``rounds`` and ``seconds``
are null); ``dirty_ratio`` is null when the partition could not be weighed. The totals' bytes,
keys and rounds add up the cleaned and partial partitions, as the printed summary's last line.

Atomicity: the report is written to ``.FILE.tmp-PID`` in FILE's directory, fsynced and renamed
over FILE, so a reader sees the previous report or the whole new one, never a part. FILE's
directory must exist (checked before the job runs: exit 2).

Thread safety: call :func:`execute` from one thread (the job's driver).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.checkpoint_file import write_atomically
from spark_kafkalog.cli_logging import utc_time

if TYPE_CHECKING:
    from spark_kafkalog.compaction_config import CompactionConfig
    from spark_kafkalog.compaction_job import JobReport, PartitionOutcome

_log = logging.getLogger(__name__)

REPORT_FORMAT = 1
EXIT_FAILED, EXIT_USAGE, EXIT_BUG = 1, 2, 4
_STATUSES = ("cleaned", "partial", "skipped", "failed", "to clean")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options: ``--config``, ``--dry-run``, ``--report``."""
    parser.add_argument(
        "--config", type=Path, help="compaction TOML (default: conf/compaction.toml)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, clean nothing")
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="also write the summary to FILE as JSON (atomically; docs/operating/index.md "
        "lists its fields)",
    )


def execute(
    config_path: Path | None,
    report_path: Path | None,
    job: Callable[[CompactionConfig], JobReport],
    prog: str = "compact",
) -> int:
    """Load the config, run ``job`` on it, write the report; the exit status. Errors are one
    line on stderr prefixed with ``prog`` (the traceback of a bug goes to the log at DEBUG)."""
    from spark_kafkalog.compaction_config import CompactionConfig

    started = time.time()
    if report_path is not None and not report_path.resolve().parent.is_dir():
        return _fail(
            prog, None, started, EXIT_USAGE, f"--report {report_path}: its directory does not exist"
        )
    try:
        config = CompactionConfig.load(config_path)
    except (KafkaLogError, OSError) as e:
        return _fail(prog, report_path, started, EXIT_USAGE, str(e))
    try:
        report = job(config)
    except (KafkaLogError, OSError) as e:
        return _fail(prog, report_path, started, EXIT_FAILED, str(e))
    except Exception as e:
        _log.debug("unexpected error in the compaction job", exc_info=True)
        return _fail(
            prog,
            report_path,
            started,
            EXIT_BUG,
            f"unexpected {type(e).__name__}: {e} (a bug in kafkalog; "
            "--log-level debug shows the traceback)",
        )
    if report_path is not None and not _write(prog, report_path, report_dict(report)):
        return EXIT_FAILED
    return report.exit_code


def _fail(prog: str, report_path: Path | None, started: float, status: int, error: str) -> int:
    print(f"{prog}: {' '.join(error.splitlines())}", file=sys.stderr, flush=True)
    if report_path is not None:
        head = _header(None, started, time.time(), False, status, error)
        _write(prog, report_path, head | {"totals": None, "partitions": []})
    return status


def _write(prog: str, path: Path, data: dict[str, Any]) -> bool:
    """:func:`write_report`, or False after one line on stderr saying why it failed."""
    try:
        write_report(path, data)
        return True
    except OSError as e:
        print(f"{prog}: cannot write the report {path}: {e}", file=sys.stderr, flush=True)
        return False


def _header(
    run_id: str | None,
    started: float,
    finished: float,
    dry_run: bool,
    status: int,
    error: str | None,
) -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "run_id": run_id,
        "host": socket.gethostname(),
        "started": utc_time(started),
        "finished": utc_time(finished),
        "seconds": round(finished - started, 3),
        "dry_run": dry_run,
        "exit_status": status,
        "error": error,
    }


def report_dict(report: JobReport) -> dict[str, Any]:
    """The module docstring's JSON object of a run that got to its summary."""
    partitions = [_partition(o) for o in report.outcomes]
    worked = [p for p in partitions if p["status"] in ("cleaned", "partial")]
    totals: dict[str, Any] = {
        s.replace(" ", "_"): sum(1 for p in partitions if p["status"] == s) for s in _STATUSES
    }
    for key in ("bytes_before", "bytes_after", "keys", "rounds"):
        totals[key] = sum(p[key] for p in worked)
    head = _header(
        report.run_id, report.started, report.finished, report.dry_run, report.exit_code, None
    )
    return head | {"totals": totals, "partitions": partitions}


def _partition(o: PartitionOutcome) -> dict[str, Any]:
    planned = o.status == "to clean"
    return {
        "log_dir": o.log_dir,
        "topic": o.topic,
        "partition": o.partition,
        "status": o.status,
        "reason": o.reason,
        "bytes_before": o.bytes_before,
        "bytes_after": None if planned else o.bytes_after,
        "dirty_ratio": None if o.dirty_ratio is None else round(o.dirty_ratio, 4),
        "keys": None if planned else o.keys,
        "rounds": None if planned else o.rounds,
        "seconds": None if planned else round(o.seconds, 3),
    }


def write_report(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON to ``path``, atomically (module docstring)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write_atomically(path, (json.dumps(data, indent=2) + "\n").encode(), tmp=tmp)
    finally:
        tmp.unlink(missing_ok=True)
