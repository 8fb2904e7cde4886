"""Delayed operations and the purgatory that holds them (Kafka's ``DelayedOperation`` and
``DelayedOperationPurgatory``).

A request that cannot be answered yet (a fetch waiting for ``min_bytes``, a produce with
``acks=all`` waiting for the high watermark) becomes a :class:`DelayedOperation`. The purgatory
watches it under one or more keys (e.g. a topic partition) until either

- its condition holds: whoever changes the state (an append, a HW move, a leadership change)
  calls :meth:`DelayedOperationPurgatory.check_and_complete` with the key, which calls the
  operation's :meth:`~DelayedOperation.try_complete`; or
- its ``delay_ms`` passes: the purgatory's reaper thread expires it.

- its requester is gone: :meth:`DelayedOperation.abandon` with ``drop`` completes it without
  ``on_complete`` (nobody to answer; ``wait`` returns None), without it completes it now.

Either way it completes exactly once: :meth:`DelayedOperation.force_complete` flips a flag under
a lock, and only the caller that flipped it runs :meth:`~DelayedOperation.on_complete` (whose
return value is the operation's result) and, when expiring, then
:meth:`~DelayedOperation.on_expiration`. A waiting thread blocks in
:meth:`DelayedOperation.wait` (on a one-shot latch, a lock released at completion), which
returns that result once both have run.

Bounds: at most ``max_pending`` operations are watched at a time (the replica manager makes it
at least ``max.connections``: a connection has one request in flight, and a closed connection's
operation is dropped, so the clients that are there never find the purgatory full). An
operation submitted when the purgatory is full (or shut down) and not completable at once is
expired immediately, in the submitting thread: the request is answered as if its wait had
run out (an early empty fetch, a REQUEST_TIMED_OUT produce), so memory stays bounded and no
caller blocks for a slot.
Completed operations leave every watch list at once (no purge interval); their timer entries
are dropped lazily, and the heap is compacted once stale entries outnumber live ones.

Timer: one daemon thread per purgatory (``ExpirationReaper-<name>``), started by the first
watched operation, sleeping on a ``heapq`` of ``(deadline, sequence, operation)``.
:meth:`DelayedOperationPurgatory.shutdown` stops and joins it, then completes (if its condition
holds) or expires every operation still pending. Callbacks run in the thread that completes the
operation: the caller of ``check_and_complete``, the submitter, or the reaper; keep them short.

Thread safety and locking rules:

- The purgatory calls ``try_complete`` only under the operation's ``lock`` (a
  ``threading.RLock`` unless one is passed in, e.g. the partition's), so it never runs
  concurrently with itself. If it raises, the operation completes with that error (``wait``
  raises it; ``on_complete`` is not called); the submitter also gets it raised.
- The purgatory's own lock guards its watch lists, its timer heap and its count; it is a leaf: it
  is never held while calling operation code, and operation code may take it (an operation that
  completes leaves the purgatory under it). Lock order: operation lock, then purgatory lock.
- ``on_complete``/``on_expiration`` run without the purgatory lock; exceptions they raise are
  logged and re-raised to the waiter by ``wait``; they never kill the reaper thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 10_000
_COMPACT_SLACK = 64


class DelayedOperation(ABC):
    """An operation that completes when its condition holds or after ``delay_ms`` milliseconds.

    Subclasses implement :meth:`try_complete` and :meth:`on_complete`, and may override
    :meth:`on_expiration`. ``lock`` serializes ``try_complete`` calls (default: a fresh RLock).
    """

    def __init__(self, delay_ms: float, *, lock: Any = None) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must not be negative, got {delay_ms}")
        self.delay_ms = delay_ms
        self.lock = lock if lock is not None else threading.RLock()
        self._state_lock = threading.Lock()
        self._completed = False
        self._expired = False
        self._submitted = False
        # A one-shot latch: held from creation, released once when the operation completes
        # (a plain lock: cheaper to make, set and wait on than a threading.Event, whose
        # Condition the completing thread notifies in Python).
        self._done = threading.Lock()
        self._done.acquire()
        self._result: Any = None
        self._error: BaseException | None = None
        self._on_done: Callable[[DelayedOperation], None] | None = None

    # -- to implement --------------------------------------------------------------------------

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, call :meth:`force_complete` and return its value.

        Called under :attr:`lock`. Return ``True`` only if this call completed the operation.
        """

    @abstractmethod
    def on_complete(self) -> Any:
        """Build the answer; called exactly once, by whoever completes the operation (also on
        expiration, before :meth:`on_expiration`: check :attr:`is_expired`). The return value is
        what :meth:`wait` returns."""

    def on_expiration(self) -> None:
        """Called after :meth:`on_complete` when the operation completed by expiring."""
        return None

    # -- state ---------------------------------------------------------------------------------

    @property
    def is_completed(self) -> bool:
        return self._completed

    @property
    def is_expired(self) -> bool:
        """``True`` once the operation completed because its time ran out (or no slot)."""
        return self._expired

    def force_complete(self) -> bool:
        """Complete now unless already completed; ``True`` if this call completed it."""
        return self._finish(expired=False)

    def abandon(self, drop: bool) -> None:
        """The requester is gone: ``drop`` completes it without :meth:`on_complete` (it leaves
        the purgatory; ``wait`` returns None), else it completes now (:meth:`force_complete`).
        Nothing happens if it already completed."""
        if not drop:
            self.force_complete()
        elif self._claim():
            self._release()

    def safe_try_complete(self) -> bool:
        """:meth:`try_complete` under :attr:`lock`."""
        with self.lock:
            return self.try_complete()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until completed (``timeout`` in seconds, ``None`` = forever) and return the
        result of :meth:`on_complete`. Raises :class:`TimeoutError` if still pending after
        ``timeout``, or the exception a callback raised."""
        if not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise TimeoutError(f"{self!r} did not complete within {timeout} s")
        self._done.release()  # open for the next waiter
        if self._error is not None:
            raise self._error
        return self._result

    # -- machinery -----------------------------------------------------------------------------

    def _claim(self, expired: bool = False) -> bool:
        """Flip the completed flag; ``True`` for the one caller that flipped it."""
        with self._state_lock:
            if self._completed:
                return False
            self._completed = True
            self._expired = expired
            return True

    def _finish(self, expired: bool) -> bool:
        if not self._claim(expired):
            return False
        self._run_callbacks(expired)
        return True

    def _fail(self, error: BaseException) -> bool:
        """Complete with ``error`` without calling ``on_complete`` (``try_complete`` raised)."""
        if not self._claim():
            return False
        self._error = error
        self._release()
        return True

    def _run_callbacks(self, expired: bool) -> None:
        try:
            self._result = self.on_complete()
        except Exception as e:  # handed to the waiter; must not kill the completing thread
            log.exception("on_complete of %r failed", self)
            self._error = e
        if expired:
            try:
                self.on_expiration()
            except Exception as e:
                log.exception("on_expiration of %r failed", self)
                self._error = self._error or e
        self._release()

    def _release(self) -> None:
        on_done = self._on_done
        if on_done is not None:
            on_done(self)
        self._done.release()


class DelayedOperationPurgatory:
    """Watches :class:`DelayedOperation` s by key and expires them; see the module docstring."""

    def __init__(self, name: str, *, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 0:
            raise ValueError(f"max_pending must not be negative, got {max_pending}")
        self.name = name
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        # Operations are held by id (subclasses may define __eq__); the values keep them alive.
        self._watchers: dict[Hashable, dict[int, DelayedOperation]] = {}
        self._pending: dict[int, tuple[DelayedOperation, tuple[Hashable, ...]]] = {}
        self._timer: list[tuple[float, int, DelayedOperation]] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def __repr__(self) -> str:
        return f"DelayedOperationPurgatory({self.name!r}, pending={self.pending})"

    def __enter__(self) -> DelayedOperationPurgatory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- public API ----------------------------------------------------------------------------

    def try_complete_else_watch(
        self, operation: DelayedOperation, keys: Iterable[Hashable]
    ) -> bool:
        """Complete ``operation`` now if it can, else watch it under ``keys`` until it completes
        or expires. ``True`` iff its condition held during this call.

        When the purgatory is full or shut down, an operation that cannot complete at once is
        expired at once (``False``, and ``operation.is_expired``).
        """
        watch_keys = tuple(dict.fromkeys(keys))
        if not watch_keys:
            raise ValueError(f"purgatory {self.name!r}: an operation needs at least one key")
        self._mark_submitted(operation)
        with operation.lock:
            try:
                if operation.try_complete():
                    return True
                if self._watch(operation, watch_keys):
                    # A state change between the first check and the watch saw no watcher.
                    return operation.try_complete()
            except Exception as e:
                operation._fail(e)
                raise
        operation._finish(expired=True)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watched under ``key`` (oldest first); return how many
        this call completed. Call it after anything that may satisfy them."""
        if key not in self._watchers:
            # Without the lock: an operation watched from now on checks its condition again
            # after its watch is in place (try_complete_else_watch), so it sees this change.
            return 0
        with self._lock:
            candidates = list(self._watchers.get(key, {}).values())
        completed = 0
        for op in candidates:
            if op.is_completed:
                continue
            try:
                if op.safe_try_complete():
                    completed += 1
            except Exception as e:
                log.exception("try_complete of %r (key %r) failed", op, key)
                completed += op._fail(e)
        return completed

    @property
    def pending(self) -> int:
        """Operations watched and not yet completed."""
        with self._lock:
            return len(self._pending)

    @property
    def watched_total(self) -> int:
        """Watch entries over every key (an operation watched under n keys counts n: Kafka's
        ``PurgatorySize``)."""
        with self._lock:
            return sum(len(ops) for ops in self._watchers.values())

    def watched(self, key: Hashable) -> int:
        """Operations pending under ``key``."""
        with self._lock:
            return len(self._watchers.get(key, ()))

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the reaper thread (joined, up to ``timeout`` seconds), then complete every
        pending operation whose condition holds and expire the others. Idempotent."""
        with self._lock:
            self._stopped = True
            self._wakeup.notify_all()
            thread = self._thread
            leftovers = [op for op, _ in self._pending.values()]
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        for op in leftovers:
            self._complete_or_expire(op)

    # -- internals -----------------------------------------------------------------------------

    def _mark_submitted(self, operation: DelayedOperation) -> None:
        with operation._state_lock:
            if operation._submitted:
                raise ValueError(f"{operation!r} was already submitted to a purgatory")
            operation._submitted = True

    def _watch(self, op: DelayedOperation, keys: tuple[Hashable, ...]) -> bool:
        """Register ``op`` under ``keys`` and in the timer; ``False`` if there is no room."""
        with self._lock:
            if self._stopped or len(self._pending) >= self.max_pending:
                return False
            op._on_done = self._forget
            if op.is_completed:  # completed by another thread before the callback was set
                return True
            self._pending[id(op)] = (op, keys)
            for key in keys:
                self._watchers.setdefault(key, {})[id(op)] = op
            deadline = time.monotonic() + op.delay_ms / 1000.0
            entry = (deadline, next(self._sequence), op)
            heapq.heappush(self._timer, entry)
            if self._timer[0] is entry:
                self._wakeup.notify()
            self._ensure_reaper()
            return True

    def _forget(self, op: DelayedOperation) -> None:
        with self._lock:
            entry = self._pending.pop(id(op), None)
            if entry is None:
                return
            for key in entry[1]:
                ops = self._watchers[key]
                del ops[id(op)]
                if not ops:
                    del self._watchers[key]
            if len(self._timer) > 2 * len(self._pending) + _COMPACT_SLACK:
                self._timer = [e for e in self._timer if id(e[2]) in self._pending]
                heapq.heapify(self._timer)

    def _ensure_reaper(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._reap, name=f"ExpirationReaper-{self.name}", daemon=True
            )
            self._thread.start()

    def _reap(self) -> None:
        while True:
            due = self._next_due()
            if due is None:
                return
            for op in due:
                op._finish(expired=True)

    def _next_due(self) -> list[DelayedOperation] | None:
        """Sleep until an operation's deadline passes; the due ones, ``None`` when stopped."""
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                while self._timer and id(self._timer[0][2]) not in self._pending:
                    heapq.heappop(self._timer)  # completed before its deadline
                if self._timer and self._timer[0][0] <= now:
                    due = []
                    while self._timer and self._timer[0][0] <= now:
                        op = heapq.heappop(self._timer)[2]
                        if id(op) in self._pending:
                            due.append(op)
                    return due
                self._wakeup.wait(self._timer[0][0] - now if self._timer else None)
            return None

    def _complete_or_expire(self, op: DelayedOperation) -> None:
        try:
            if op.safe_try_complete():
                return
        except Exception as e:
            log.exception("try_complete of %r failed during shutdown", op)
            op._fail(e)
            return
        op._finish(expired=True)
