"""The threads that read remote storage for Fetch (Kafka's ``RemoteStorageThreadPool``, the
``remote.log.reader.threads`` pool): :class:`RemoteStorageThreadPool`.

``threads`` daemon threads (started on first use) take tasks from a queue of at most
``max_pending`` (``remote.log.reader.max.pending.tasks``): :meth:`submit` on a full queue raises
:class:`RemoteReadRejectedError` at once (Kafka's ``RejectedExecutionException``), so no request
waits for a slot. Each task's :class:`~concurrent.futures.Future` gets its result or exception;
a task cancelled before it started never runs. Daemon threads, unlike a
``ThreadPoolExecutor``'s: a read held by a store that stopped answering (bounded by the store's
own timeouts, object_store.py) never holds up the process's exit. :meth:`shutdown` cancels what
is queued and lets the threads end after their current task, never waiting for them (one stop
marker, which each thread passes on: the queue may be smaller than the pool).

Thread safety: :meth:`submit` and :meth:`shutdown` from any thread.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from broker_embedded.errors import KafkaLogError

T = TypeVar("T")
_STOP = None


class RemoteReadRejectedError(KafkaLogError):
    """The queue of remote reads is full (``remote.log.reader.max.pending.tasks``)."""


class RemoteStorageThreadPool:
    """See the module docstring."""

    def __init__(self, name: str, threads: int, max_pending: int) -> None:
        self.name = name
        self._size = threads
        self._tasks: queue.Queue[tuple[Future[Any], Callable[[], Any]] | None] = queue.Queue(
            max_pending
        )
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._stopped:
                raise RemoteReadRejectedError(f"{self.name} is shut down")
            try:
                self._tasks.put_nowait((future, fn))
            except queue.Full:
                raise RemoteReadRejectedError(
                    f"{self.name}: {self._tasks.maxsize} remote reads are queued already "
                    "(remote.log.reader.max.pending.tasks)"
                ) from None
            if len(self._threads) < self._size:
                t = threading.Thread(
                    target=self._run, daemon=True, name=f"{self.name}-{len(self._threads)}"
                )
                self._threads.append(t)
                t.start()
        return future

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is _STOP:
                with contextlib.suppress(queue.Full):  # the next thread ends too
                    self._tasks.put_nowait(_STOP)
                return
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)

    def shutdown(self) -> None:
        """Cancel the queued tasks; each thread ends after its current one."""
        with self._lock:
            self._stopped = True
            threads = len(self._threads)
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[0].cancel()
        if threads:  # one stop, passed on by each thread (the queue may hold fewer than
            # the threads, max_pending < threads: putting one a thread could wait for a
            # busy thread's read); no task is queued any more, so it fits
            with contextlib.suppress(queue.Full):
                self._tasks.put_nowait(_STOP)
