"""A background task scheduler (Kafka's ``KafkaScheduler``, simplified to one thread).

The broker's periodic chores (flushing checkpoints, retention, HW checkpointing, ...) and its
one-off delayed jobs run here. A :class:`KafkaScheduler` owns one daemon thread,
``kafka-scheduler-<name>``, started by :meth:`~KafkaScheduler.startup`. Tasks run one at a time,
in deadline order (ties in the order they were scheduled), in that thread; a long task delays the
others, so keep tasks short.

Timing: deadlines use the monotonic clock. A one-shot task runs once, ``delay_ms`` after it was
scheduled. A periodic task first runs after ``delay_ms``, then at a fixed rate: each run is due
``period_ms`` after the previous one was due; a run that overran its period is followed at once
by the next, with no burst of catch-up runs.

Failures: an exception from a task is logged (``logging``, with the scheduler's and the task's
names) and never stops the thread; a periodic task that raised is still rescheduled.

State: new -> started (:meth:`startup`) -> shut down (:meth:`shutdown`), never back. Scheduling
requires a started scheduler; after shutdown it raises :class:`BrokerClosedError`. Shutdown
drops the tasks not yet run, lets a running one finish and joins the thread.

Bounds: at most :data:`MAX_TASKS` tasks are scheduled at a time (a periodic task counts once,
running or waiting); scheduling more raises ``ValueError``.

Thread safety: every method may be called from any thread, including from a task (a task may
schedule or cancel tasks, or shut its scheduler down, which then does not join itself). One
``threading.Condition`` guards the heap and the state; the thread sleeps on it until the
earliest deadline or a change, never polling. Task code runs without the lock held.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

from broker_embedded.errors import BrokerClosedError, KafkaLogError

MAX_TASKS = 10_000
THREAD_NAME_PREFIX = "kafka-scheduler-"

logger = logging.getLogger(__name__)

_NEW, _STARTED, _SHUT_DOWN = "new", "started", "shut down"


class ScheduledTask:
    """A handle on a scheduled task: its name, period and :meth:`cancel`."""

    __slots__ = ("name", "fn", "period_ms", "_scheduler", "_cancelled")

    def __init__(
        self,
        scheduler: KafkaScheduler,
        name: str,
        fn: Callable[[], None],
        period_ms: float | None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self._scheduler = scheduler
        self._cancelled = False

    @property
    def is_periodic(self) -> bool:
        return self.period_ms is not None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Run this task no more; a run in progress finishes. Idempotent."""
        self._scheduler._cancel(self)

    def __repr__(self) -> str:
        period = f", every {self.period_ms} ms" if self.is_periodic else ""
        return f"ScheduledTask({self.name!r}{period}{', cancelled' if self._cancelled else ''})"


def _check_ms(value: float, what: str, *, positive: bool) -> float:
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{what} must be a finite number {bound}, got {value!r}")
    return value


class KafkaScheduler:
    """Runs scheduled tasks one at a time in one daemon thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, ScheduledTask]] = []
        self._sequence = itertools.count()
        self._state = _NEW
        self._running: ScheduledTask | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"KafkaScheduler({self.name!r}, {self._state}, {len(self._heap)} waiting)"

    @property
    def is_started(self) -> bool:
        """Started and not shut down."""
        return self._state == _STARTED

    def startup(self) -> None:
        """Start the scheduler's thread; once only."""
        with self._cond:
            if self._state == _SHUT_DOWN:
                raise BrokerClosedError(f"scheduler {self.name} is shut down: it cannot restart")
            if self._state == _STARTED:
                raise KafkaLogError(f"scheduler {self.name} is already started")
            self._thread = threading.Thread(
                target=self._run, name=THREAD_NAME_PREFIX + self.name, daemon=True
            )
            self._state = _STARTED
        self._thread.start()

    def schedule(
        self,
        name: str,
        fn: Callable[[], None],
        delay_ms: float,
        period_ms: float | None = None,
    ) -> ScheduledTask:
        """Run ``fn`` after ``delay_ms`` milliseconds, then every ``period_ms`` if given."""
        if not callable(fn):
            raise TypeError(f"task {name!r} of scheduler {self.name}: {fn!r} is not callable")
        delay_ms = _check_ms(delay_ms, f"delay of task {name!r}", positive=False)
        if period_ms is not None:
            period_ms = _check_ms(period_ms, f"period of task {name!r}", positive=True)
        task = ScheduledTask(self, name, fn, period_ms)
        with self._cond:
            self._check_can_schedule(name)
            self._push(time.monotonic() + delay_ms / 1000, task)
        return task

    def shutdown(self, timeout: float | None = 5) -> None:
        """Drop the waiting tasks, let a running one finish, and join the thread (for at most
        ``timeout`` seconds; ``None`` waits as long as it takes). Idempotent."""
        with self._cond:
            self._state = _SHUT_DOWN
            self._heap.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            running = self._running
            logger.warning(
                "scheduler %s: task %r still running %s s after shutdown",
                self.name,
                running.name if running else None,
                timeout,
            )

    # -- the scheduler thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            due = self._next_due()
            if due is None:
                return
            deadline, task = due
            self._run_task(task)
            self._finish(deadline, task)

    def _next_due(self) -> tuple[float, ScheduledTask] | None:
        """Wait for the earliest task to fall due and take it; ``None`` at shutdown."""
        with self._cond:
            while self._state == _STARTED:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                deadline, _, task = heapq.heappop(self._heap)
                self._running = task
                return deadline, task
            return None

    def _run_task(self, task: ScheduledTask) -> None:
        try:
            task.fn()
        except BaseException:
            logger.exception("scheduler %s: task %r failed", self.name, task.name)

    def _finish(self, deadline: float, task: ScheduledTask) -> None:
        """Reschedule a periodic task that is still wanted."""
        with self._cond:
            self._running = None
            if task.period_ms is None or task.cancelled or self._state != _STARTED:
                return
            next_deadline = max(deadline + task.period_ms / 1000, time.monotonic())
            self._push(next_deadline, task)

    # -- under the lock ------------------------------------------------------------------------

    def _push(self, deadline: float, task: ScheduledTask) -> None:
        heapq.heappush(self._heap, (deadline, next(self._sequence), task))
        if self._heap[0][2] is task:
            self._cond.notify()  # earlier than what the thread sleeps for

    def _check_can_schedule(self, name: str) -> None:
        if self._state == _SHUT_DOWN:
            raise BrokerClosedError(f"scheduler {self.name} is shut down: cannot schedule {name!r}")
        if self._state == _NEW:
            raise KafkaLogError(f"scheduler {self.name} is not started: cannot schedule {name!r}")
        running = self._running
        held = len(self._heap) + (
            running is not None and running.is_periodic and not running.cancelled
        )
        if held >= MAX_TASKS:
            raise ValueError(
                f"scheduler {self.name} already holds {held} tasks (the maximum): "
                f"cannot schedule {name!r}"
            )

    def _cancel(self, task: ScheduledTask) -> None:
        with self._cond:
            task._cancelled = True
            kept = [entry for entry in self._heap if entry[2] is not task]
            if len(kept) != len(self._heap):
                heapq.heapify(kept)
                self._heap = kept
