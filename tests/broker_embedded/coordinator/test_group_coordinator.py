"""The group coordinator's state machine, called directly (no network): Kafka's rebalance
semantics, error codes, static membership, offsets and what goes through the store seam."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from broker_embedded.coordinator.group_coordinator import GroupConfig, GroupCoordinator, JoinRequest
from broker_embedded.coordinator.group_heartbeats import MemberIdentity
from broker_embedded.coordinator.group_metadata import (
    GroupState,
    JoinResult,
    OffsetAndMetadata,
    Protocol,
    SyncResult,
    now_ms,
)
from broker_embedded.coordinator.group_store import InMemoryGroupStore
from broker_embedded.storage.topic_partition import TopicPartition

TIMEOUT_S = 10.0


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


class Waiter:
    """A callback that records its one result."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result = None

    def __call__(self, result) -> None:
        self.result = result
        self.done.set()

    def get(self):
        assert self.done.wait(TIMEOUT_S), "no answer"
        return self.result


@pytest.fixture
def coordinator():
    c = GroupCoordinator(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0))
    yield c
    c.shutdown()


def join(
    c,
    member_id="",
    protocols=(("range", ("t",)),),
    instance=None,
    session=10_000,
    rebalance=10_000,
    protocol_type="consumer",
    group="g",
    version=9,
) -> Waiter:
    w = Waiter()
    req = JoinRequest(
        group,
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        rebalance,
        session,
        protocol_type,
        tuple(Protocol(n, subscription(*t)) for n, t in protocols),
        require_known_member_id=version >= 4,
    )
    c.join_group(req, w)
    return w


def join_new(c, **kw) -> JoinResult:
    """A new member's two JoinGroups (MEMBER_ID_REQUIRED, then with the id)."""
    first = join(c, **kw).get()
    assert first.error.code == 79 and first.member_id.startswith("client-")
    return join(c, member_id=first.member_id, **kw).get()


def sync(c, result: JoinResult, assignments=None, group="g") -> Waiter:
    w = Waiter()
    c.sync_group(
        group, result.generation_id, result.member_id, None, "consumer", None, assignments or {}, w
    )
    return w


def test_one_member_becomes_leader_of_generation_1_and_stable_after_sync(coordinator):
    r = join_new(coordinator)
    assert (r.error, r.generation_id, r.protocol_name, r.leader_id) == (
        None,
        1,
        "range",
        r.member_id,
    )
    assert [m.member_id for m in r.members] == [r.member_id]
    s = sync(coordinator, r, {r.member_id: b"A"}).get()
    assert s == SyncResult(None, "consumer", "range", b"A")
    assert coordinator.describe_group("g").state is GroupState.STABLE
    stored = coordinator.store.group("g")
    assert (stored.generation_id, [m.assignment for m in stored.members]) == (1, [b"A"])


def test_a_second_member_triggers_a_rebalance_the_first_learns_by_heartbeat(coordinator):
    a = join_new(coordinator)
    sync(coordinator, a, {a.member_id: b"A"}).get()
    first = join(coordinator).get()
    b_wait = join(coordinator, member_id=first.member_id)  # waits for a to rejoin
    assert coordinator.heartbeat("g", a.member_id, None, 1).code == 27
    a2 = join(coordinator, member_id=a.member_id).get()
    b = b_wait.get()
    assert (a2.generation_id, b.generation_id, a2.leader_id, b.leader_id) == (
        2,
        2,
        a.member_id,
        a.member_id,
    )
    assert len(a2.members) == 2 and b.members == ()
    b_sync = sync(coordinator, b)
    assert not b_sync.done.is_set()  # a follower waits for the leader's assignment
    sync(coordinator, a2, {a.member_id: b"A", first.member_id: b"B"}).get()
    assert b_sync.get().assignment == b"B"
    assert coordinator.heartbeat("g", a.member_id, None, 1).code == 22  # ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", "nobody", None, 2).code == 25  # UNKNOWN_MEMBER_ID


def test_join_errors(coordinator):
    assert join(coordinator, group="").get().error.code == 24
    assert join(coordinator, session=50).get().error.code == 26
    assert join(coordinator, member_id="x-1").get().error.code == 25
    join_new(coordinator)
    assert join(coordinator, protocol_type="connect").get().error.code == 23
    assert join(coordinator, protocols=(("other", ("t",)),)).get().error.code == 23


def test_protocol_chosen_by_vote_among_those_all_support():
    # group.initial.rebalance.delay.ms holds the first generation until all three joined
    c = GroupCoordinator(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=500))
    try:
        rr, rng, sticky = ("roundrobin", ("t",)), ("range", ("t",)), ("sticky", ("t",))
        waits = [join(c, version=3, protocols=p) for p in ((rng, rr), (rr, rng), (rr, sticky))]
        results = [w.get() for w in waits]
        assert {(r.generation_id, r.protocol_name) for r in results} == {(1, "roundrobin")}
    finally:
        c.shutdown()


def test_group_max_size(coordinator):
    small = GroupCoordinator(
        GroupConfig(min_session_timeout_ms=100, max_size=1, initial_rebalance_delay_ms=0)
    )
    try:
        a = join(small, version=3).get()
        sync(small, a, {a.member_id: b""}).get()
        assert join(small, version=3).get().error.code == 81
    finally:
        small.shutdown()


def test_session_expiry_removes_a_silent_member_and_the_group_empties(coordinator):
    r = join_new(coordinator, session=200)
    sync(coordinator, r, {r.member_id: b"A"}).get()
    deadline = threading.Event()
    for _ in range(100):
        if coordinator.describe_group("g").state is GroupState.EMPTY:
            break
        deadline.wait(0.05)
    g = coordinator.describe_group("g")
    assert (g.state, g.generation_id, g.members) == (GroupState.EMPTY, 2, ())
    assert coordinator.store.group("g").members == ()  # the empty group is stored


def test_leave_and_delete(coordinator):
    r = join_new(coordinator)
    sync(coordinator, r, {r.member_id: b"A"}).get()
    assert coordinator.delete_groups(["g"])["g"].code == 68  # NON_EMPTY_GROUP
    top, errors = coordinator.leave_group(
        "g", [MemberIdentity(r.member_id), MemberIdentity("ghost")]
    )
    assert top is None and [e and e.code for e in errors] == [None, 25]
    g = coordinator.describe_group("g")
    assert (g.state, g.generation_id) == (GroupState.EMPTY, 2)
    assert coordinator.delete_groups(["g", "none"])["g"] is None
    assert coordinator.delete_groups(["none"])["none"].code == 69
    assert coordinator.list_groups() == []


def test_offset_commit_validation_and_store(coordinator):
    off = {("t", 0): OffsetAndMetadata(5, -1, "m", 1)}
    assert coordinator.commit_offsets("s", "", None, -1, off) is None  # simple group
    assert coordinator.fetch_offsets("s", None) == off
    assert coordinator.store.offsets("s") == off
    assert coordinator.commit_offsets("nope", "m", None, 3, off).code == 22
    r = join_new(coordinator)
    assert coordinator.commit_offsets("g", r.member_id, None, 1, off).code == 27  # completing
    sync(coordinator, r, {r.member_id: b"A"}).get()
    assert coordinator.commit_offsets("g", r.member_id, None, 1, off) is None
    assert coordinator.commit_offsets("g", r.member_id, None, 0, off).code == 22
    assert coordinator.commit_offsets("g", "", None, -1, off).code == 25  # non-empty group
    err, per = coordinator.delete_offsets("g", [("t", 0), ("u", 0)])
    assert err is None and per[("t", 0)].code == 86 and per[("u", 0)] is None


def test_static_member_rejoin_keeps_generation_and_fences_the_old_id(coordinator):
    a = join(coordinator, instance="i1").get()
    sync(coordinator, a, {a.member_id: b"A"}).get()
    again = join(coordinator, instance="i1").get()  # restarted: unknown member id
    assert again.error is None and again.generation_id == 1 and again.member_id != a.member_id
    assert coordinator.heartbeat("g", a.member_id, "i1", 1).code == 82  # FENCED_INSTANCE_ID
    assert sync(coordinator, again).get().assignment == b"A"
    assert coordinator.describe_group("g").state is GroupState.STABLE


def test_a_restarted_coordinator_loads_groups_and_offsets_from_its_store():
    store = InMemoryGroupStore()
    cfg = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
    first = GroupCoordinator(cfg, store)
    r = join_new(first)
    sync(first, r, {r.member_id: b"A"}).get()
    first.commit_offsets("g", r.member_id, None, 1, {("t", 1): OffsetAndMetadata(9)})
    first.shutdown()
    second = GroupCoordinator(cfg, store)
    try:
        g = second.describe_group("g")
        assert (g.state, g.generation_id, [m.assignment for m in g.members]) == (
            GroupState.STABLE,
            1,
            [b"A"],
        )
        assert second.fetch_offsets("g", [("t", 1)]) == {("t", 1): OffsetAndMetadata(9)}
        assert second.heartbeat("g", r.member_id, None, 1) is None
    finally:
        second.shutdown()


def test_transactional_offsets_wait_for_their_marker(coordinator):
    """TxnOffsetCommit's offsets are stored at once but pending (OffsetFetch leaves them out,
    require_stable answers UNSTABLE_OFFSET_COMMIT) until their producer's marker; at a COMMIT
    the later record of a partition wins (Kafka's rule), an ABORT drops only that producer's."""
    marker = TopicPartition("__consumer_offsets", 0)

    def txn(pid: int, offsets: dict) -> None:
        o = {tp: OffsetAndMetadata(v) for tp, v in offsets.items()}
        assert coordinator.commit_txn_offsets("g", (pid, 0), "", None, -1, o) is None

    coordinator.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
    txn(7, {("t", 0): 10, ("t", 1): 20})
    coordinator.commit_offsets("g", "", None, -1, {("t", 1): OffsetAndMetadata(15)})  # later
    txn(8, {("t", 2): 30})
    assert coordinator.fetch_offsets("g", None) == {
        ("t", 0): OffsetAndMetadata(1),
        ("t", 1): OffsetAndMetadata(15),
    }
    stable = coordinator.fetch_offsets("g", [("t", 0), ("t", 2), ("t", 3)], require_stable=True)
    assert {tp: getattr(v, "code", v) for tp, v in stable.items()} == {("t", 0): 88, ("t", 2): 88}
    coordinator.on_txn_marker(TopicPartition("out", 0), 7, commit=True)  # not a group partition
    coordinator.on_txn_marker(marker, 7, commit=True)
    coordinator.on_txn_marker(marker, 8, commit=False)
    coordinator.on_txn_marker(marker, 7, commit=True)  # written again after a restart: nothing
    expected = {("t", 0): OffsetAndMetadata(10), ("t", 1): OffsetAndMetadata(15)}
    assert coordinator.fetch_offsets("g", None, require_stable=True) == expected
    assert coordinator.store.offsets("g") == expected


def test_a_restarted_coordinator_keeps_undecided_transactional_offsets():
    store = InMemoryGroupStore()
    first = GroupCoordinator(store=store)
    offsets = {("t", 0): OffsetAndMetadata(4, -1, "m", 1)}
    assert first.commit_txn_offsets("g", (5, 1), "", None, -1, offsets) is None
    first.shutdown()
    second = GroupCoordinator(store=store)
    try:
        assert second.fetch_offsets("g", None) == {}
        second.on_txn_marker(TopicPartition("__consumer_offsets", 3), 5, commit=True)
        assert second.fetch_offsets("g", None) == offsets
    finally:
        second.shutdown()


def test_offsets_expire_after_retention_counted_from_when_the_group_became_empty():
    """KIP-211: a Stable consumer group keeps the offsets of the topics it subscribes to (and
    loses others past retention from their commit); once Empty, every offset expires
    ``offsets_retention_ms`` after the group became Empty, with tombstones, and the group goes."""
    cfg = GroupConfig(
        min_session_timeout_ms=100, initial_rebalance_delay_ms=0, offsets_retention_ms=1_000
    )
    c = GroupCoordinator(cfg)
    try:
        r = join_new(c)  # subscribes to "t"
        sync(c, r, {r.member_id: b"A"}).get()
        old = {("t", 0): OffsetAndMetadata(5, -1, "", 1), ("u", 0): OffsetAndMetadata(7, -1, "", 1)}
        assert c.commit_offsets("g", r.member_id, None, 1, old) is None
        assert c.expire_offsets(2_000) == 1  # "u" is not subscribed: expired from its commit
        assert c.store.offsets("g") == {("t", 0): OffsetAndMetadata(5, -1, "", 1)}
        assert c.leave_group("g", [MemberIdentity(r.member_id)])[0] is None
        empty_at = c.describe_group("g").state_timestamp_ms
        assert c.expire_offsets(empty_at + 999) == 0
        assert c.fetch_offsets("g", None) == {("t", 0): OffsetAndMetadata(5, -1, "", 1)}
        assert c.expire_offsets(empty_at + 1_000) == 1
        assert (c.list_groups(), c.store.offsets("g"), c.store.group("g")) == ([], {}, None)
    finally:
        c.shutdown()


def test_a_simple_groups_offsets_expire_from_their_commit_and_pending_ones_keep_it():
    c = GroupCoordinator(GroupConfig(offsets_retention_ms=1_000))
    try:
        committed = {
            ("t", 0): OffsetAndMetadata(1, -1, "", 100),
            ("t", 1): OffsetAndMetadata(2, -1, "", 600),
        }
        assert c.commit_offsets("s", "", None, -1, committed) is None
        pending = {("t", 2): OffsetAndMetadata(9)}
        assert c.commit_txn_offsets("s", (3, 0), "", None, -1, pending) is None
        assert c.expire_offsets(1_100) == 1  # t-0 only
        assert c.expire_offsets(1_600) == 1  # t-1: no committed offset left...
        assert [g.group_id for g in c.list_groups()] == ["s"]  # ...but a pending one keeps it
        c.on_txn_marker(TopicPartition("__consumer_offsets", 0), 3, commit=False)
        assert c.expire_offsets(1_600) == 0
        assert c.list_groups() == []
    finally:
        c.shutdown()


def test_the_expiry_thread_removes_expired_offsets_by_itself():
    cfg = GroupConfig(offsets_retention_ms=50, offsets_retention_check_interval_ms=20)
    c = GroupCoordinator(cfg)
    try:
        c.start_expiry()
        offsets = {("t", 0): OffsetAndMetadata(1, -1, "", now_ms())}
        assert c.commit_offsets("s", "", None, -1, offsets) is None
        deadline = time.monotonic() + TIMEOUT_S
        while c.list_groups() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (c.list_groups(), c.store.offsets("s")) == ([], {})
    finally:
        c.shutdown()
