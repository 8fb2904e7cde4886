"""The purgatory: completion by key, expiration order, exactly-once completion under races, the
bound on watched operations, shutdown, and callback failures."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from broker_embedded.common.purgatory import DelayedOperation, DelayedOperationPurgatory


class Op(DelayedOperation):
    """Completes when ``ready()``; records every callback in ``events``."""

    def __init__(
        self,
        delay_ms: float,
        ready: Callable[[], bool] = lambda: False,
        name: str = "op",
        events: list | None = None,
        **kwargs,
    ) -> None:
        super().__init__(delay_ms, **kwargs)
        self.ready = ready
        self.name = name
        self.events = events if events is not None else []
        self.completions = 0
        self.inside = 0
        self.max_inside = 0

    def try_complete(self) -> bool:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        try:
            return self.ready() and self.force_complete()
        finally:
            self.inside -= 1

    def on_complete(self):
        self.completions += 1
        self.events.append(("complete", self.name))
        return ("expired" if self.is_expired else "done", self.name)

    def on_expiration(self) -> None:
        self.events.append(("expire", self.name))


def reapers(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"ExpirationReaper-{name}"]


@pytest.fixture
def purgatory(request):
    p = DelayedOperationPurgatory(request.node.name[:40])
    yield p
    p.shutdown()
    assert not reapers(p.name)


def test_completes_at_once_without_watching_or_a_thread(purgatory) -> None:
    op = Op(1000, ready=lambda: True)
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is True
    assert op.is_completed and not op.is_expired
    assert op.wait(0) == ("done", "op")
    assert purgatory.pending == 0 and purgatory.watched(("t", 0)) == 0
    assert not reapers(purgatory.name)


def test_completion_by_key(purgatory) -> None:
    state = {"hw": 0}
    op = Op(10_000, ready=lambda: state["hw"] >= 5)
    assert purgatory.try_complete_else_watch(op, [("t", 0), ("t", 1)]) is False
    assert purgatory.pending == 1
    assert purgatory.watched(("t", 0)) == purgatory.watched(("t", 1)) == 1
    state["hw"] = 3
    assert purgatory.check_and_complete(("t", 0)) == 0
    state["hw"] = 5
    assert purgatory.check_and_complete(("other", 9)) == 0
    assert not op.is_completed
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert op.wait(1) == ("done", "op")
    assert op.events == [("complete", "op")]
    assert purgatory.pending == 0 and purgatory.watched(("t", 0)) == 0
    assert purgatory.check_and_complete(("t", 0)) == 0
    assert op.completions == 1


def test_check_and_complete_goes_oldest_first(purgatory) -> None:
    events: list = []
    ops = [Op(10_000, ready=lambda: True, name=str(i), events=events) for i in range(5)]
    gate = {"open": False}
    for op in ops:
        op.ready = lambda: gate["open"]
        purgatory.try_complete_else_watch(op, ["k"])
    gate["open"] = True
    assert purgatory.check_and_complete("k") == 5
    assert [name for _, name in events] == ["0", "1", "2", "3", "4"]


def test_expiration_order_and_callbacks(purgatory) -> None:
    events: list = []
    ops = [Op(d, name=str(d), events=events) for d in (60, 20, 40)]
    start = time.monotonic()
    for op in ops:
        assert purgatory.try_complete_else_watch(op, ["k"]) is False
    results = [op.wait(5) for op in ops]
    elapsed = time.monotonic() - start
    assert results == [("expired", "60"), ("expired", "20"), ("expired", "40")]
    assert events == [
        ("complete", "20"),
        ("expire", "20"),
        ("complete", "40"),
        ("expire", "40"),
        ("complete", "60"),
        ("expire", "60"),
    ]
    assert elapsed >= 0.06
    assert all(op.is_expired and op.completions == 1 for op in ops)
    assert purgatory.pending == 0 and purgatory.watched("k") == 0


def test_not_expired_early_and_an_earlier_deadline_wakes_the_reaper(purgatory) -> None:
    slow = Op(60_000, name="slow")
    purgatory.try_complete_else_watch(slow, ["k"])
    with pytest.raises(TimeoutError):
        slow.wait(0.05)
    fast = Op(10, name="fast")
    purgatory.try_complete_else_watch(fast, ["k"])
    assert fast.wait(2) == ("expired", "fast")
    assert not slow.is_completed and purgatory.pending == 1
    assert len(reapers(purgatory.name)) == 1


def test_exactly_once_under_concurrent_check_and_complete(purgatory) -> None:
    gate = threading.Event()
    shared = threading.RLock()  # one lock for all: try_complete never runs concurrently
    ops = [Op(60_000, ready=gate.is_set, name=str(i), lock=shared) for i in range(300)]
    for op in ops:
        assert purgatory.try_complete_else_watch(op, ["k", ("x", int(op.name) % 3)]) is False
    assert purgatory.pending == 300
    counts: list[int] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        total = 0
        for _ in range(5):
            total += purgatory.check_and_complete("k" if i % 2 else ("x", i % 3))
        counts.append(total)

    gate.set()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 300
    assert all(op.completions == 1 and not op.is_expired for op in ops)
    assert all(op.max_inside == 1 for op in ops)
    assert purgatory.pending == 0


def test_exactly_once_when_expiry_races_completion(purgatory) -> None:
    rng = random.Random(7)
    gate = threading.Event()
    ops = [Op(rng.uniform(0, 10), ready=gate.is_set, name=str(i)) for i in range(200)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    done_by_check: list[int] = []
    stop = threading.Event()

    def checker() -> None:
        while not stop.is_set():
            done_by_check.append(purgatory.check_and_complete("k"))

    threads = [threading.Thread(target=checker) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.005)
    gate.set()
    for op in ops:
        op.wait(5)
    stop.set()
    for t in threads:
        t.join()
    assert all(op.completions == 1 for op in ops)
    expired = sum(op.is_expired for op in ops)
    assert sum(done_by_check) == len(ops) - expired
    assert all(("expire", op.name) in op.events for op in ops if op.is_expired)
    assert purgatory.pending == 0


def test_limit_expires_new_operations_at_once() -> None:
    with DelayedOperationPurgatory("bounded", max_pending=2) as p:
        state = {"ready": False}
        a, b = Op(60_000, lambda: state["ready"], "a"), Op(60_000, name="b")
        assert not p.try_complete_else_watch(a, ["k"])
        assert not p.try_complete_else_watch(b, ["k"])
        c = Op(60_000, name="c")
        assert p.try_complete_else_watch(c, ["k"]) is False
        assert c.is_expired and c.wait(0) == ("expired", "c")
        assert c.events == [("complete", "c"), ("expire", "c")]
        assert p.pending == 2 and p.watched("k") == 2
        ready_now = Op(60_000, lambda: True, "d")
        assert p.try_complete_else_watch(ready_now, ["k"]) is True  # needs no slot
        state["ready"] = True
        assert p.check_and_complete("k") == 1  # a completes; its slot frees
        e = Op(60_000, name="e")
        assert p.try_complete_else_watch(e, ["k"]) is False and not e.is_completed
        assert p.pending == 2


def test_zero_capacity_never_starts_a_thread() -> None:
    p = DelayedOperationPurgatory("zero", max_pending=0)
    op = Op(60_000)
    assert p.try_complete_else_watch(op, ["k"]) is False
    assert op.wait(0) == ("expired", "op")
    assert not reapers("zero")
    p.shutdown()


def test_shutdown_completes_or_expires_pending_and_stops_the_thread() -> None:
    p = DelayedOperationPurgatory("stopping")
    state = {"ready": False}
    can = Op(60_000, lambda: state["ready"], "can")
    cannot = Op(60_000, name="cannot")
    p.try_complete_else_watch(can, ["k"])
    p.try_complete_else_watch(cannot, ["j"])
    assert len(reapers("stopping")) == 1
    state["ready"] = True  # nobody called check_and_complete
    p.shutdown()
    assert can.wait(0) == ("done", "can")
    assert cannot.wait(0) == ("expired", "cannot")
    assert p.pending == 0 and not reapers("stopping")
    late = Op(60_000, name="late")
    assert p.try_complete_else_watch(late, ["k"]) is False and late.is_expired
    assert not reapers("stopping")
    p.shutdown()  # idempotent


def test_failing_callbacks_reach_the_waiter_and_spare_the_reaper(purgatory) -> None:
    class Broken(Op):
        def on_complete(self):
            raise RuntimeError("boom in on_complete")

    class BadCheck(Op):
        def try_complete(self) -> bool:
            if self.ready():
                raise ValueError("boom in try_complete")
            return False

    broken = Broken(5, name="broken")
    purgatory.try_complete_else_watch(broken, ["k"])
    with pytest.raises(RuntimeError, match="boom in on_complete"):
        broken.wait(2)
    after = Op(5, name="after")
    purgatory.try_complete_else_watch(after, ["k"])
    assert after.wait(2) == ("expired", "after")  # the reaper survived

    gate = {"open": False}
    bad = BadCheck(60_000, lambda: gate["open"], "bad")
    good = Op(60_000, lambda: gate["open"], "good")
    purgatory.try_complete_else_watch(bad, ["j"])
    purgatory.try_complete_else_watch(good, ["j"])
    gate["open"] = True
    assert purgatory.check_and_complete("j") == 2  # bad completes with its error
    with pytest.raises(ValueError, match="boom in try_complete"):
        bad.wait(0)
    assert good.wait(0) == ("done", "good")
    assert purgatory.pending == 0


def test_try_complete_error_on_submit_is_raised_and_not_watched(purgatory) -> None:
    class Bad(Op):
        def try_complete(self) -> bool:
            raise KeyError("no such partition")

    op = Bad(60_000)
    with pytest.raises(KeyError):
        purgatory.try_complete_else_watch(op, ["k"])
    assert op.is_completed and purgatory.pending == 0
    with pytest.raises(KeyError):
        op.wait(0)


def test_argument_errors(purgatory) -> None:
    with pytest.raises(ValueError, match="negative"):
        Op(-1)
    with pytest.raises(ValueError, match="at least one key"):
        purgatory.try_complete_else_watch(Op(10), [])
    op = Op(60_000)
    purgatory.try_complete_else_watch(op, ["a", "a", "b"])
    assert purgatory.watched("a") == 1 and purgatory.pending == 1
    with pytest.raises(ValueError, match="already submitted"):
        purgatory.try_complete_else_watch(op, ["c"])


def test_completed_operations_leave_the_timer(purgatory) -> None:
    gate = {"open": False}
    for i in range(500):
        purgatory.try_complete_else_watch(Op(60_000, lambda: gate["open"], str(i)), [i % 7])
    gate["open"] = True
    assert sum(purgatory.check_and_complete(k) for k in range(7)) == 500
    assert purgatory.pending == 0
    assert len(purgatory._timer) <= 64 + 1  # long deadlines do not pin completed operations


def test_force_complete_is_exactly_once() -> None:
    op = Op(10)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(op.force_complete())) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and op.completions == 1
    assert op.wait(0) == ("done", "op")


def test_every_waiter_gets_the_result_and_a_negative_timeout_does_not_block(purgatory) -> None:
    """Completion releases every thread waiting on the operation, and later waits return at
    once; before it, a timeout of 0 or below raises TimeoutError at once."""
    flag = threading.Event()
    op = Op(60_000, ready=flag.is_set)
    purgatory.try_complete_else_watch(op, ["k"])
    for timeout in (0, -1):
        with pytest.raises(TimeoutError):
            op.wait(timeout)
    results: list = []
    waiters = [threading.Thread(target=lambda: results.append(op.wait(10))) for _ in range(4)]
    for t in waiters:
        t.start()
    flag.set()
    assert purgatory.check_and_complete("k") == 1
    for t in waiters:
        t.join(10)
    assert results == [("done", "op")] * 4
    assert op.wait(0) == op.wait(None) == ("done", "op")
