"""The scheduler: one-shot and periodic timing, order, failures that do not stop it, one task at
a time, the task bound, cancel, and shutdown (joins, runs nothing more, refuses new tasks).

Timing assertions have generous bounds; the whole file runs in well under 3 s."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from itertools import pairwise

import pytest

from broker_embedded.errors import BrokerClosedError, KafkaLogError
from broker_embedded.scheduler import MAX_TASKS, THREAD_NAME_PREFIX, KafkaScheduler


@pytest.fixture
def scheduler() -> Iterator[KafkaScheduler]:
    s = KafkaScheduler("test")
    s.startup()
    try:
        yield s
    finally:
        s.shutdown()


class Counter:
    """A task that counts its runs and remembers when and in which thread they happened."""

    def __init__(self, fail: bool = False) -> None:
        self.times: list[float] = []
        self.threads: set[str] = set()
        self.fail = fail
        self.ran = threading.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.threads.add(threading.current_thread().name)
        self.ran.set()
        if self.fail:
            raise RuntimeError("task failure for the test")

    @property
    def count(self) -> int:
        return len(self.times)


def test_one_shot_runs_once_after_its_delay(scheduler: KafkaScheduler) -> None:
    task = Counter()
    start = time.monotonic()
    scheduler.schedule("once", task, delay_ms=50)
    assert task.ran.wait(2)
    assert task.times[0] - start >= 0.05
    time.sleep(0.1)
    assert task.count == 1
    assert task.threads == {THREAD_NAME_PREFIX + "test"}


def test_periodic_runs_at_about_its_period(scheduler: KafkaScheduler) -> None:
    task = Counter()
    start = time.monotonic()
    scheduler.schedule("tick", task, delay_ms=0, period_ms=20)
    time.sleep(0.3)
    count = task.count
    assert 5 <= count <= 20, count  # about 16
    assert task.times[0] - start < 0.2
    gaps = [b - a for a, b in pairwise(task.times)]
    assert sum(gaps) / len(gaps) >= 0.01


def test_tasks_run_in_deadline_order(scheduler: KafkaScheduler) -> None:
    order: list[str] = []
    done = threading.Event()
    scheduler.schedule("late", lambda: (order.append("late"), done.set()), delay_ms=120)
    for name in ("a", "b", "c"):
        scheduler.schedule(name, lambda name=name: order.append(name), delay_ms=60)
    scheduler.schedule("first", lambda: order.append("first"), delay_ms=0)
    assert done.wait(2)
    assert order == ["first", "a", "b", "c", "late"]


def test_a_failing_task_is_logged_and_later_tasks_still_run(
    scheduler: KafkaScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    failing, periodic_failing, later = Counter(fail=True), Counter(fail=True), Counter()
    with caplog.at_level(logging.ERROR, "broker_embedded.scheduler"):
        scheduler.schedule("boom", failing, delay_ms=0)
        scheduler.schedule("boom-periodic", periodic_failing, delay_ms=0, period_ms=10)
        scheduler.schedule("later", later, delay_ms=30)
        assert later.ran.wait(2)
        deadline = time.monotonic() + 2
        while periodic_failing.count < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert failing.count == 1
    assert periodic_failing.count >= 3  # still rescheduled after raising
    messages = [r.getMessage() for r in caplog.records]
    assert "scheduler test: task 'boom' failed" in messages
    assert "scheduler test: task 'boom-periodic' failed" in messages
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)
    assert scheduler.is_started


def test_tasks_run_one_at_a_time(scheduler: KafkaScheduler) -> None:
    active, peak = [0], [0]
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def task() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        done.release()

    for i in range(5):
        scheduler.schedule(f"t{i}", task, delay_ms=0)
    for _ in range(5):
        assert done.acquire(timeout=2)
    assert peak[0] == 1


def test_shutdown_lets_a_running_task_finish_and_runs_nothing_more() -> None:
    s = KafkaScheduler("stop")
    s.startup()
    started, finished = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        time.sleep(0.15)
        finished.set()

    periodic = Counter()
    s.schedule("slow", slow, delay_ms=0)
    s.schedule("tick", periodic, delay_ms=0, period_ms=10)
    pending = Counter()
    s.schedule("pending", pending, delay_ms=100)
    assert started.wait(2)
    s.shutdown()
    assert finished.is_set()  # joined after the running task
    assert not s.is_started
    threads = {t.name for t in threading.enumerate()}
    assert THREAD_NAME_PREFIX + "stop" not in threads
    count = periodic.count
    time.sleep(0.15)
    assert periodic.count == count
    assert pending.count == 0
    s.shutdown()  # idempotent


def test_schedule_after_shutdown_is_refused() -> None:
    s = KafkaScheduler("closed")
    s.startup()
    s.shutdown()
    with pytest.raises(BrokerClosedError, match="scheduler closed is shut down.*'late'"):
        s.schedule("late", Counter(), delay_ms=0)
    with pytest.raises(BrokerClosedError):
        s.startup()


def test_lifecycle_errors() -> None:
    s = KafkaScheduler("life")
    assert not s.is_started
    with pytest.raises(KafkaLogError, match="not started"):
        s.schedule("early", Counter(), delay_ms=0)
    s.startup()
    try:
        assert s.is_started
        with pytest.raises(KafkaLogError, match="already started"):
            s.startup()
    finally:
        s.shutdown()
    KafkaScheduler("never-started").shutdown()


@pytest.mark.parametrize(
    ("delay_ms", "period_ms"),
    [(-1, None), (float("nan"), None), (float("inf"), None), (0, 0), (0, -5)],
)
def test_invalid_times_are_refused(
    scheduler: KafkaScheduler, delay_ms: float, period_ms: float | None
) -> None:
    with pytest.raises(ValueError, match="'bad'"):
        scheduler.schedule("bad", Counter(), delay_ms=delay_ms, period_ms=period_ms)


def test_at_most_max_tasks(scheduler: KafkaScheduler) -> None:
    tasks = [scheduler.schedule(f"t{i}", Counter(), delay_ms=60_000) for i in range(MAX_TASKS)]
    with pytest.raises(ValueError, match=f"holds {MAX_TASKS} tasks"):
        scheduler.schedule("one too many", Counter(), delay_ms=0)
    tasks[0].cancel()
    scheduler.schedule("fits again", Counter(), delay_ms=60_000)


def test_cancel(scheduler: KafkaScheduler) -> None:
    once, periodic = Counter(), Counter()
    handle = scheduler.schedule("once", once, delay_ms=50)
    handle.cancel()
    handle.cancel()
    assert handle.cancelled
    ticking = scheduler.schedule("tick", periodic, delay_ms=0, period_ms=10)
    assert periodic.ran.wait(2)
    ticking.cancel()
    time.sleep(0.03)  # a run in progress may finish
    count = periodic.count
    time.sleep(0.1)
    assert periodic.count == count
    assert once.count == 0


def test_a_task_may_schedule_and_shut_down_its_scheduler() -> None:
    s = KafkaScheduler("self")
    s.startup()
    follow_up, stopped = Counter(), threading.Event()

    def first() -> None:
        s.schedule("follow-up", follow_up, delay_ms=0)

    def stop() -> None:
        s.shutdown()  # from the scheduler's own thread: must not join itself
        stopped.set()

    s.schedule("first", first, delay_ms=0)
    assert follow_up.ran.wait(2)
    s.schedule("stop", stop, delay_ms=0)
    assert stopped.wait(2)
    assert not s.is_started
    s.shutdown()
