"""The scheduled compaction job: ``spark-submit jobs/compact.py --config conf/compaction.toml``
(:func:`run`, Spark) and ``kafkalog compact --config ...`` (:func:`run_local`, one process).

1. Plan (:func:`plan`, on the driver): in every configured log dir, the partitions of the
   registered topics that match the configured patterns and have ``cleanup.policy`` with
   ``compact``. A log dir owned by a running broker (or a write commit) is left alone: its
   partitions are skipped, naming the owner (its broker's own cleaner compacts them). A log dir
   whose last owner died is first recovered (a log manager opened and closed: truncated torn
   tails, rebuilt indexes, rolled back interrupted write commits). Each partition is then
   opened under its cleaning lock (cleaning_lock.py) and weighed as Kafka's cleaner manager
   does: its dirty section from ``cleaner-offset-checkpoint`` up to the first uncleanable
   offset (active segment, last stable offset, ``min.compaction.lag.ms``), cleaned when its
   dirty ratio is above the threshold (``min_cleanable_dirty_ratio``, else the topic's
   ``min.cleanable.dirty.ratio``) or ``max.compaction.lag.ms`` is overdue.
2. Clean (:func:`clean_partition`, one Spark task per partition, the largest first): under the
   partition's cleaning lock, the log alone is opened and cleaned in rounds with an offset map
   of ``map_memory_per_task`` bytes (a round covers what the map holds, the next round goes
   on from there) until the dirty section is done or the time budget is spent; after each
   round its end offset goes into ``cleaner-offset-checkpoint``.
3. Report: a summary table (each partition: cleaned, partial, skipped or failed, and why;
   bytes before and after, keys, rounds, seconds) and totals; progress lines while it runs;
   with ``--report FILE`` the same as JSON (compaction_report.py).

Safety: the job never writes to a log dir someone owns; two runs never clean one partition at
once (the second skips it, naming the first); a run killed at any moment leaves every log valid
(each segment swap is atomic, the checkpoint only moves after a swap) and a rerun goes on from
the checkpoint; a partition that needs nothing is skipped, so reruns are idempotent. A failure
on one partition (corrupt data; a full disk, named as the file that did not fit and ``No space
left on device``, its ``.cleaned`` files deleted and its segments as they were) fails that
partition only.

Exit status (:func:`exit_status`): 0 every partition done (cleaned, or skipped because it needs
nothing or someone else cleans it); 1 a partition failed (or the job could not run: a log dir
missing, an I/O error); 2 bad configuration or usage; 3 no failure, but work left: the time
budget ran out (a partition ``partial``, or skipped before it started) or a round was stopped
(``partial``), so a rerun goes on; 4 an unexpected error (a bug in kafkalog). A failure wins
over work left.

Thread safety: :func:`clean_partition` runs one partition per call; concurrent calls (tasks,
other runs) are serialised per partition by the cleaning lock.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from broker_embedded.cleaner.log_cleaner_manager import (
    read_cleaner_checkpoint,
    record_cleaner_checkpoint,
)
from broker_embedded.cleaner.log_to_clean import LogToClean, cleanable_offsets, log_to_clean
from broker_embedded.errors import (
    KafkaLogError,
    LogDirLockedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.storage.cleaning_lock import (
    OWNED,
    WRITER_WAITING,
    CleaningRefusedError,
    PartitionCleaningLock,
)
from broker_embedded.storage.cleaning_session import CleaningAbortedError
from broker_embedded.storage.log_dir import check_log_dir
from broker_embedded.storage.log_dir_lock import LogDirLock, held_by_compaction, lock_holder
from broker_embedded.storage.log_manager import (
    METADATA_TOPIC,
    LogManager,
    open_log_for_cleaning,
    shut_down_cleanly,
)
from broker_embedded.storage.staged_write import COMMIT_OWNER
from broker_embedded.storage.topic_config_file import TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog
from spark_kafkalog.compaction_config import CompactionConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

CLEANED, PARTIAL, SKIPPED, FAILED, PLANNED = "cleaned", "partial", "skipped", "failed", "to clean"
OWNER = "kafkalog compact run"
BUDGET_USED = "the time budget was used up before it started"
_LOCK_RETRY_S = 0.2


@dataclass(frozen=True)
class JobSettings:
    """What every task needs: the config, the run's id, its start and deadline (epoch
    seconds)."""

    config: CompactionConfig
    run_id: str
    deadline: float
    started: float

    @property
    def owner(self) -> str:
        return f"{OWNER} {self.run_id}"


@dataclass(frozen=True)
class CleaningTask:
    """A partition to clean, as planned."""

    log_dir: str
    topic: str
    partition: int
    total_bytes: int  # below the first uncleanable offset's segment: the work, for the order
    dirty_ratio: float
    log_bytes: int  # the whole log, as the summary's "before"

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class PartitionOutcome:
    """What happened to one partition (a row of the summary)."""

    log_dir: str
    topic: str
    partition: int
    status: str
    reason: str = ""
    bytes_before: int = 0
    bytes_after: int = 0
    dirty_ratio: float | None = None
    keys: int = 0
    rounds: int = 0
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def new_settings(config: CompactionConfig, now: float | None = None) -> JobSettings:
    start = time.time() if now is None else now
    return JobSettings(config, new_run_id(), start + config.time_budget_seconds, start)


# -- weighing a partition ----------------------------------------------------------------------


def _weigh(lg: UnifiedLog, log_dir: Path, now_ms: int) -> LogToClean:
    snap = lg.cleaning_snapshot()
    tp = lg.topic_partition
    offsets = cleanable_offsets(lg, snap, read_cleaner_checkpoint(log_dir, tp), now_ms)
    return log_to_clean(lg, snap, offsets, now_ms)


def _threshold(config: CompactionConfig, lg: UnifiedLog) -> float:
    if config.min_cleanable_dirty_ratio is not None:
        return config.min_cleanable_dirty_ratio
    return lg.config.min_cleanable_dirty_ratio


def _why_not(ltc: LogToClean, threshold: float) -> str | None:
    """None when the partition needs cleaning, else why not."""
    if ltc.cleanable_bytes == 0:
        return "nothing cleanable (all clean, or dirty only in the active segment)"
    if ltc.need_compaction_now or ltc.cleanable_ratio > threshold:
        return None
    return f"dirty ratio {ltc.cleanable_ratio:.2f} <= {threshold:g}"


def _acquire(
    log_dir: Path, tp: TopicPartition, settings: JobSettings
) -> PartitionCleaningLock | str:
    """The partition's cleaning lock, or why it is skipped. A write commit (holding the log dir
    or waiting for it) is waited for up to ``lock_wait_seconds``: they are short."""
    give_up = time.monotonic() + settings.config.lock_wait_seconds
    while True:
        try:
            return PartitionCleaningLock.acquire(log_dir, tp, settings.owner)
        except CleaningRefusedError as e:
            commit = e.reason == WRITER_WAITING or (
                e.reason == OWNED and f"({COMMIT_OWNER} " in lock_holder(log_dir)
            )
            if not commit or time.monotonic() >= give_up:
                return str(e)
            time.sleep(_LOCK_RETRY_S)


# -- the plan (driver) -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobReport:
    """A run's outcome per partition (in log dir, topic, partition order), exit status, and
    when it ran (epoch seconds)."""

    run_id: str
    outcomes: tuple[PartitionOutcome, ...]
    exit_code: int
    started: float = 0.0
    finished: float = 0.0
    dry_run: bool = False

    def by_partition(self) -> dict[tuple[str, str, int], PartitionOutcome]:
        return {(o.log_dir, o.topic, o.partition): o for o in self.outcomes}


@dataclass(frozen=True)
class Plan:
    """The partitions to clean (the largest first) and those skipped, with why."""

    tasks: tuple[CleaningTask, ...]
    skipped: tuple[PartitionOutcome, ...]
    ignored: int  # partitions of matching topics that are not compacted


def _partitions(log_dir: Path, config: CompactionConfig) -> list[TopicPartition]:
    found = []
    for e in os.scandir(log_dir):
        tp = TopicPartition.try_parse_dir_name(e.name) if e.is_dir() else None
        if tp is not None and tp.topic != METADATA_TOPIC and config.matches(tp.topic):
            found.append(tp)
    return sorted(found)


def _owner_of(log_dir: Path) -> str | None:
    """Who owns ``log_dir`` exclusively right now (a broker, a write commit), or None."""
    if not LogDirLock.is_locked(log_dir):
        return None
    holder = lock_holder(log_dir)
    return None if held_by_compaction(holder) else holder or "an unknown process"


def _recover(log_dir: Path, settings: JobSettings) -> None:
    """Recover a log dir whose last owner died, as a broker's start would."""
    _log.info("%s was not shut down cleanly: recovering it before cleaning", log_dir)
    LogManager(log_dir, owner=f"{settings.owner} (recovery)", node_id=0).close()


def _owned_reason(log_dir: Path, settings: JobSettings) -> str | None:
    """Why no partition of ``log_dir`` can be cleaned now, after recovering it if its last
    owner died; None when it can."""
    owner = _owner_of(log_dir)
    if owner is None and not shut_down_cleanly(log_dir):
        try:
            _recover(log_dir, settings)
        except LogDirLockedError as e:
            return str(e)
    if owner is None:
        return None
    if f"({COMMIT_OWNER} " in owner:
        return f"log dir held by {owner}: a write commit, rerun later"
    return f"log dir owned by {owner}: its broker's own cleaner compacts it"


def _plan_partition(
    log_dir: Path, tp: TopicPartition, settings: JobSettings, now_ms: int
) -> CleaningTask | PartitionOutcome:
    skip = partial(PartitionOutcome, str(log_dir), tp.topic, tp.partition, SKIPPED)
    try:
        lock = _acquire(log_dir, tp, settings)
        if isinstance(lock, str):
            return skip(reason=lock)
        with lock:
            lg = open_log_for_cleaning(log_dir, tp, settings.config.topic_defaults)
            try:
                ltc = _weigh(lg, log_dir, now_ms)
                why = _why_not(ltc, _threshold(settings.config, lg))
                size = lg.size_in_bytes
            finally:
                lg.close()
    except (KafkaLogError, OSError) as e:
        return replace(skip(), status=FAILED, reason=f"{type(e).__name__}: {e}")
    if why is None:
        return CleaningTask(
            str(log_dir), tp.topic, tp.partition, ltc.total_bytes, ltc.cleanable_ratio, size
        )
    return skip(reason=why, bytes_before=size, bytes_after=size, dirty_ratio=ltc.cleanable_ratio)


def _plan_dir(log_dir: Path, settings: JobSettings, out: list, tasks: list) -> int:
    """Plan ``log_dir`` (tasks, and outcomes of what is not cleaned); the count of partitions
    of matching topics that are not compacted."""
    config = settings.config
    check_log_dir(log_dir, " (compaction config log_dirs)")
    topics = TopicConfigFile(log_dir).read()
    partitions = _partitions(log_dir, config)
    compacted = [
        tp
        for tp in partitions
        if tp.topic in topics
        and topics[tp.topic].log_config(config.topic_defaults, tp.topic).compact
        and tp.partition < topics[tp.topic].partitions
    ]
    ignored = sum(1 for tp in partitions if tp.topic in topics) - len(compacted)
    unregistered = "topic not registered in kafkalog-topics.json (open the dir with kafkalog once)"
    out.extend(
        PartitionOutcome(str(log_dir), tp.topic, tp.partition, SKIPPED, unregistered)
        for tp in partitions
        if tp.topic not in topics
    )
    if not compacted:
        return ignored
    reason = _owned_reason(log_dir, settings)
    if reason is not None:
        out.extend(
            PartitionOutcome(str(log_dir), tp.topic, tp.partition, SKIPPED, reason)
            for tp in compacted
        )
        return ignored
    now_ms = int(time.time() * 1000)
    for tp in compacted:
        planned = _plan_partition(log_dir, tp, settings, now_ms)
        (tasks if isinstance(planned, CleaningTask) else out).append(planned)
    return ignored


def plan(settings: JobSettings) -> Plan:
    """Step 1 of the module docstring."""
    skipped: list[PartitionOutcome] = []
    tasks: list[CleaningTask] = []
    ignored = 0
    for log_dir in settings.config.log_dirs:
        ignored += _plan_dir(log_dir, settings, skipped, tasks)
    tasks.sort(key=lambda t: (-t.total_bytes, t.log_dir, t.topic, t.partition))
    return Plan(tuple(tasks), tuple(skipped), ignored)


# -- cleaning one partition (a task) -----------------------------------------------------------


def clean_partition(
    task: CleaningTask,
    settings: JobSettings,
    progress: Callable[[str], None] | None = None,
) -> PartitionOutcome:
    """Step 2 of the module docstring for one partition; never raises for the partition's
    own problems (they become a ``failed`` outcome)."""
    started = time.monotonic()
    outcome = PartitionOutcome(
        task.log_dir, task.topic, task.partition, SKIPPED, dirty_ratio=task.dirty_ratio
    )
    if time.time() >= settings.deadline:
        return replace(outcome, reason=BUDGET_USED)
    log_dir, tp = Path(task.log_dir), task.topic_partition
    try:
        lock = _acquire(log_dir, tp, settings)
        if isinstance(lock, str):
            return replace(outcome, reason=lock)
        with lock:
            if not (log_dir / tp.dir_name).is_dir():
                return replace(outcome, reason="the partition was deleted after planning")
            outcome = _clean_locked(log_dir, tp, settings, outcome, progress)
    except UnknownTopicOrPartitionError:
        outcome = replace(outcome, reason="the topic was deleted after planning")
    except (KafkaLogError, OSError, ValueError) as e:
        _log.warning("compaction of %s in %s failed: %s", tp, log_dir, e)
        outcome = replace(outcome, status=FAILED, reason=f"{type(e).__name__}: {e}")
    return replace(outcome, seconds=time.monotonic() - started)


def _clean_locked(
    log_dir: Path,
    tp: TopicPartition,
    settings: JobSettings,
    outcome: PartitionOutcome,
    progress: Callable[[str], None] | None,
) -> PartitionOutcome:
    from broker_embedded.cleaner.cleaner import Cleaner  # numba: compiled on first use
    from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap

    config = settings.config
    lg = open_log_for_cleaning(log_dir, tp, config.topic_defaults)
    try:
        before = lg.size_in_bytes
        ltc = _weigh(lg, log_dir, int(time.time() * 1000))
        why = _why_not(ltc, _threshold(config, lg))
        if why is not None:
            return replace(
                outcome,
                reason=f"cleaned meanwhile: {why}",
                bytes_before=before,
                bytes_after=before,
                dirty_ratio=ltc.cleanable_ratio,
            )
        offset_map = SkimpyOffsetMap(config.map_memory_per_task, config.load_factor)
        cleaner = Cleaner(offset_map, should_stop=lambda: time.time() >= settings.deadline)
        status, reason, keys, rounds = CLEANED, "", 0, 0
        checkpoint = read_cleaner_checkpoint(log_dir, tp)
        while True:
            try:
                result = cleaner.clean(lg, checkpoint)
            except CleaningAbortedError as e:
                status, reason = PARTIAL, f"round {rounds + 1} stopped: {e}"
                if time.time() >= settings.deadline:
                    reason = f"the time budget ran out in round {rounds + 1}"
                break
            if not result.cleaned:
                break
            record_cleaner_checkpoint(log_dir, tp, result.end_offset)
            checkpoint = result.end_offset
            rounds += 1
            keys += result.map_entries
            if progress is not None:
                progress(
                    f"{tp} in {log_dir}: round {rounds} cleaned offsets "
                    f"[{result.first_dirty_offset}, {result.end_offset}) of "
                    f"[{result.first_dirty_offset}, {result.first_uncleanable_offset}), "
                    f"{result.map_entries:,} keys"
                )
            if not result.map_full or result.end_offset >= result.first_uncleanable_offset:
                break
            if time.time() >= settings.deadline:
                status, reason = PARTIAL, f"the time budget ran out after round {rounds}"
                break
        return replace(
            outcome,
            status=status,
            reason=reason,
            bytes_before=before,
            bytes_after=lg.size_in_bytes,
            keys=keys,
            rounds=rounds,
        )
    finally:
        lg.close()


class _Every:
    """Passes a progress line on at most once per ``interval`` seconds."""

    def __init__(self, interval: float, emit: Callable[[str], None]) -> None:
        self.interval = interval
        self.emit = emit
        self.last = time.monotonic()

    def __call__(self, line: str) -> None:
        if time.monotonic() - self.last >= self.interval:
            self.last = time.monotonic()
            self.emit(line)


def _task_log() -> logging.Logger:
    """The tasks' progress log: to the executor's stderr, whatever the worker's logging."""
    task_log = logging.getLogger(f"{__name__}.task")
    if not task_log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("kafkalog compaction: %(message)s"))
        task_log.addHandler(handler)
        task_log.setLevel(logging.INFO)
        task_log.propagate = False
    return task_log


def _clean_in_task(settings: JobSettings, tasks: Iterable[CleaningTask]) -> list[PartitionOutcome]:
    progress = _Every(settings.config.progress_interval_seconds, _task_log().info)
    return [clean_partition(t, settings, progress) for t in tasks]


# -- the runs ----------------------------------------------------------------------------------


def run(
    spark: SparkSession, config: CompactionConfig, out: TextIO, *, dry_run: bool = False
) -> JobReport:
    """The Spark job: plan on the driver, one task per partition (the largest first), the
    summary on ``out``; the exit status as :func:`exit_status` says."""
    started = time.monotonic()
    settings = new_settings(config)
    the_plan = plan(settings)
    _print_plan(the_plan, settings, out)
    outcomes: list[PartitionOutcome] = []
    if the_plan.tasks and not dry_run:
        sc = spark.sparkContext
        group = f"kafkalog-compaction-{settings.run_id}"
        sc.setJobGroup(group, f"kafkalog compaction: {len(the_plan.tasks)} partitions")
        done = threading.Event()
        reporter = threading.Thread(
            target=_report_spark_progress,
            args=(sc, group, len(the_plan.tasks), config, out, done, started),
            daemon=True,
        )
        reporter.start()
        try:
            rdd = sc.parallelize(the_plan.tasks, len(the_plan.tasks))
            outcomes = rdd.mapPartitions(partial(_clean_in_task, settings)).collect()
        finally:
            done.set()
            reporter.join()
            sc.setJobGroup(None, None)  # type: ignore[arg-type]
    return _finish(settings, the_plan, outcomes, out, started, dry_run)


def run_local(config: CompactionConfig, out: TextIO, *, dry_run: bool = False) -> JobReport:
    """``kafkalog compact``: the same job in this process, one partition after the other (the
    largest first), a progress line per partition and per round."""
    started = time.monotonic()
    settings = new_settings(config)
    the_plan = plan(settings)
    _print_plan(the_plan, settings, out)
    outcomes = []
    if not dry_run:
        total = len(the_plan.tasks)
        progress = _Every(
            config.progress_interval_seconds,
            lambda line: print(f"  ... {line}", file=out, flush=True),
        )
        for i, task in enumerate(the_plan.tasks, 1):
            o = clean_partition(task, settings, progress)
            outcomes.append(o)
            print(
                f"[{i}/{total}] {o.name} in {o.log_dir}: {o.status}"
                f"{' (' + o.reason + ')' if o.reason else ''}, {_size(o.bytes_before)} -> "
                f"{_size(o.bytes_after)} in {o.seconds:.1f} s",
                file=out,
                flush=True,
            )
    return _finish(settings, the_plan, outcomes, out, started, dry_run)


def _report_spark_progress(
    sc,
    group: str,
    total: int,
    config: CompactionConfig,
    out: TextIO,
    done: threading.Event,
    started: float,
) -> None:
    tracker = sc.statusTracker()
    while not done.wait(config.progress_interval_seconds):
        completed = active = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage:
                    completed += stage.numCompletedTasks
                    active += stage.numActiveTasks
        print(
            f"compaction: {completed}/{total} partitions done, {active} cleaning, "
            f"{time.monotonic() - started:.0f} s",
            file=out,
            flush=True,
        )


# -- the report --------------------------------------------------------------------------------


def _size(n: int) -> str:
    """Bytes in kB, MB or GB (decimal units): two decimals below 10 units, one above."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.{2 if n < 10 * scale else 1}f} {unit}"
    return f"{n} B"


def _print_plan(the_plan: Plan, settings: JobSettings, out: TextIO) -> None:
    total = sum(t.log_bytes for t in the_plan.tasks)
    print(
        f"kafkalog compaction run {settings.run_id} on {socket.gethostname()}: "
        f"{len(the_plan.tasks)} partitions to clean ({_size(total)}), {len(the_plan.skipped)} "
        f"skipped, {the_plan.ignored} not compacted; time budget "
        f"{settings.config.time_budget_seconds:g} s",
        file=out,
        flush=True,
    )


def summary_table(outcomes: Iterable[PartitionOutcome]) -> list[str]:
    """The summary's lines: a header and one row per partition."""
    header = (
        "log dir",
        "partition",
        "status",
        "dirty",
        "before",
        "after",
        "keys",
        "rounds",
        "seconds",
        "why",
    )
    rows = [header]
    for o in outcomes:
        dirty = "" if o.dirty_ratio is None else f"{o.dirty_ratio:.2f}"
        done = (
            ("", "", "", "")
            if o.status == PLANNED
            else (_size(o.bytes_after), f"{o.keys:,}", str(o.rounds), f"{o.seconds:.1f}")
        )
        rows.append((o.log_dir, o.name, o.status, dirty, _size(o.bytes_before), *done, o.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    right = {3, 4, 5, 6, 7, 8}
    return [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=False))
        )
        + "  "
        + r[-1]
        for r in rows
    ]


def _finish(
    settings: JobSettings,
    the_plan: Plan,
    outcomes: list[PartitionOutcome],
    out: TextIO,
    started: float,
    dry_run: bool,
) -> JobReport:
    if dry_run:
        outcomes = [
            PartitionOutcome(
                t.log_dir,
                t.topic,
                t.partition,
                PLANNED,
                bytes_before=t.log_bytes,
                dirty_ratio=t.dirty_ratio,
            )
            for t in the_plan.tasks
        ]
    everything = sorted(
        [*outcomes, *the_plan.skipped], key=lambda o: (o.log_dir, o.topic, o.partition)
    )
    for line in summary_table(everything):
        print(line.rstrip(), file=out)
    counts = {
        s: sum(1 for o in everything if o.status == s) for s in (CLEANED, PARTIAL, SKIPPED, FAILED)
    }
    worked = [o for o in outcomes if o.status in (CLEANED, PARTIAL)]
    before = sum(o.bytes_before for o in worked)
    after = sum(o.bytes_after for o in worked)
    print(
        f"cleaned {counts[CLEANED]}, partial {counts[PARTIAL]}, skipped {counts[SKIPPED]}, "
        f"failed {counts[FAILED]}: {_size(before)} -> {_size(after)}, "
        f"{sum(o.keys for o in worked):,} keys, {sum(o.rounds for o in worked)} rounds, "
        f"{time.monotonic() - started:.1f} s",
        file=out,
        flush=True,
    )
    return JobReport(
        settings.run_id,
        tuple(everything),
        exit_status(everything),
        settings.started,
        time.time(),
        dry_run,
    )


def exit_status(outcomes: Iterable[PartitionOutcome]) -> int:
    """The module docstring's exit status of a run that got to its summary: 0, 1 or 3."""
    statuses = [(o.status, o.reason) for o in outcomes]
    if any(status == FAILED for status, _ in statuses):
        return 1
    work_left = any(s == PARTIAL or (s, r) == (SKIPPED, BUDGET_USED) for s, r in statuses)
    return 3 if work_left else 0
