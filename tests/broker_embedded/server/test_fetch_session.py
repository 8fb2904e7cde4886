"""Fetch sessions (KIP-227): request kinds, epochs, incremental responses, the bounded cache and
its eviction order. Scenarios marked "Kafka:" restate a case of Kafka's ``FetchSessionTest``
with this module's API and the same expected outcome."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker_embedded.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL,
    INVALID_SESSION_ID,
    LEGACY,
    MAX_EPOCH,
    CachedPartition,
    EpochEndOffset,
    FetchContext,
    FetchContextResponse,
    FetchManager,
    FetchMetadata,
    FetchRequestPartition,
    FetchResponsePartition,
    FetchSessionCache,
    FetchSessionMisuseError,
    FetchSessionRequest,
    FullFetchContext,
    IncrementalFetchContext,
    RequestKind,
    SessionErrorContext,
    SessionlessFetchContext,
    TopicIdPartition,
    next_epoch,
)

FOO_ID = uuid.UUID(int=0xF00)
BAR_ID = uuid.UUID(int=0xBA2)
ZAR_ID = uuid.UUID(int=0x2A2)
NAMES = {FOO_ID: "foo", BAR_ID: "bar", ZAR_ID: "zar"}
FOO0 = TopicIdPartition(FOO_ID, "foo", 0)
FOO1 = TopicIdPartition(FOO_ID, "foo", 1)
BAR0 = TopicIdPartition(BAR_ID, "bar", 0)
BAR1 = TopicIdPartition(BAR_ID, "bar", 1)
ZAR0 = TopicIdPartition(ZAR_ID, "zar", 0)

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
V12, V13 = 12, 13


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


class FileRegion:
    """Stands for a sendfile region: opaque to the session, which only asks its length."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def setup(slots: int = 10, eviction_ms: int = 1000, **kw) -> tuple[FetchManager, FakeClock]:
    clock = FakeClock()
    cache = FetchSessionCache(slots, eviction_ms, rng=random.Random(12), **kw)
    return FetchManager(cache, clock), clock


def req(offset: int, max_bytes: int = 100, leader_epoch: int = -1, last_fetched: int = -1):
    return FetchRequestPartition(offset, max_bytes, 0, leader_epoch, last_fetched)


def resp(hw: int, log_start: int | None = None, **kw) -> FetchResponsePartition:
    return FetchResponsePartition(
        high_watermark=hw,
        last_stable_offset=kw.pop("lso", hw),
        log_start_offset=hw if log_start is None else log_start,
        **kw,
    )


def err(code: int) -> FetchResponsePartition:
    return FetchResponsePartition(error_code=code)


def new_context(
    manager: FetchManager,
    metadata: FetchMetadata,
    parts: Iterable[tuple[TopicIdPartition, FetchRequestPartition]] = (),
    forgotten: Iterable[TopicIdPartition] = (),
    follower: bool = False,
    version: int = V13,
    names: dict[uuid.UUID, str] | None = None,
) -> FetchContext:
    request = FetchSessionRequest(version, metadata, tuple(parts), tuple(forgotten), follower)
    return manager.new_context(request, NAMES if names is None else names)


def answer(context: FetchContext, results) -> FetchContextResponse:
    return context.update_and_generate_response(dict(results))


def open_session(manager: FetchManager, parts, results, follower=False, version=V13) -> int:
    context = new_context(manager, INITIAL, parts, follower=follower, version=version)
    assert type(context) is FullFetchContext
    session_id = answer(context, results).session_id
    assert session_id != INVALID_SESSION_ID
    return session_id


def tips(context_or_response: FetchContext | FetchContextResponse) -> list[TopicIdPartition]:
    """The partitions a context reads or a response carries, in order."""
    return [tip for tip, _ in context_or_response.partitions]


# --- fetch metadata ---------------------------------------------------------------------------


def test_next_epoch_increments_wraps_to_one_and_keeps_final() -> None:
    assert [next_epoch(e) for e in (0, 1, 41, MAX_EPOCH - 1, MAX_EPOCH, -1, -9)] == [
        1,
        2,
        42,
        MAX_EPOCH,
        1,
        FINAL_EPOCH,
        FINAL_EPOCH,
    ]


@pytest.mark.parametrize(
    ("session_id", "epoch", "kind", "full"),
    [
        (0, -1, RequestKind.SESSIONLESS, True),
        (0, 0, RequestKind.NEW_SESSION, True),
        (7, 0, RequestKind.CLOSE_AND_NEW_SESSION, True),
        (7, -1, RequestKind.CLOSE_SESSION, True),
        (7, 3, RequestKind.INCREMENTAL, False),
        (0, 3, RequestKind.INCREMENTAL, False),
        (7, -2, RequestKind.INCREMENTAL, False),
    ],
)
def test_request_kinds(session_id: int, epoch: int, kind: RequestKind, full: bool) -> None:
    metadata = FetchMetadata(session_id, epoch)
    assert (metadata.kind, metadata.is_full) == (kind, full)


def test_constants_and_next_incremental() -> None:
    assert (INITIAL, LEGACY) == (FetchMetadata(0, 0), FetchMetadata(0, -1))
    assert FetchMetadata(9, MAX_EPOCH).next_incremental() == FetchMetadata(9, 1)


# --- request kinds ----------------------------------------------------------------------------


def test_sessionless_fetch_reads_and_returns_every_partition_without_a_session() -> None:
    manager, _ = setup()
    context = new_context(manager, LEGACY, [(FOO0, req(0)), (BAR0, req(5))])
    assert type(context) is SessionlessFetchContext
    assert context.partitions == ((FOO0, req(0)), (BAR0, req(5)))
    response = answer(context, [(FOO0, resp(10)), (BAR0, resp(20))])
    assert response == FetchContextResponse(0, 0, ((FOO0, resp(10)), (BAR0, resp(20))))
    assert manager.cache.size == 0


def test_kafka_fetch_requests() -> None:
    """Kafka: testFetchRequests."""
    manager, _ = setup()
    parts = [(FOO0, req(0)), (FOO1, req(10))]
    results = [(FOO0, resp(100)), (FOO1, resp(10))]
    context = new_context(manager, INITIAL, parts)
    assert type(context) is FullFetchContext
    assert context.partitions == tuple(parts)
    response = answer(context, results)
    session_id = response.session_id
    assert session_id != INVALID_SESSION_ID
    assert (response.error_code, response.partitions) == (0, tuple(results))

    # A wrong epoch, then an unknown id: error contexts, nothing read, session id 0.
    for metadata, code in [
        (FetchMetadata(session_id, 5), INVALID_FETCH_SESSION_EPOCH),
        (FetchMetadata(session_id + 1, 1), FETCH_SESSION_ID_NOT_FOUND),
    ]:
        context = new_context(manager, metadata, parts)
        assert type(context) is SessionErrorContext
        assert context.partitions == ()
        assert answer(context, results) == FetchContextResponse(code, 0, ())

    # Continue the session: an empty request reads the session's partitions; nothing changed.
    context = new_context(manager, FetchMetadata(session_id, 1))
    assert type(context) is IncrementalFetchContext
    assert context.partitions == tuple(parts)
    assert answer(context, results) == FetchContextResponse(0, session_id, ())

    # The same epoch again is a stale epoch now.
    context = new_context(manager, FetchMetadata(session_id, 1), parts)
    assert answer(context, results) == FetchContextResponse(INVALID_FETCH_SESSION_EPOCH, 0, ())

    # A throttled incremental fetch: empty, the session's id, the throttle time.
    context = new_context(manager, FetchMetadata(session_id, 2))
    assert context.throttled_response(100) == FetchContextResponse(0, session_id, (), 100)

    # Close the session with FINAL_EPOCH: a sessionless fetch of the request's partitions.
    parts8 = [(BAR0, req(0)), (BAR1, req(10))]
    context = new_context(manager, FetchMetadata(session_id, FINAL_EPOCH), parts8)
    assert type(context) is SessionlessFetchContext
    assert manager.cache.size == 0
    response = answer(context, [(BAR0, resp(100)), (BAR1, resp(100))])
    assert (response.error_code, response.session_id) == (0, INVALID_SESSION_ID)


def test_full_fetch_with_a_session_id_closes_it_and_opens_a_new_one() -> None:
    manager, _ = setup()
    first = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(5))])
    context = new_context(manager, FetchMetadata(first, 0), [(BAR0, req(1))])
    assert type(context) is FullFetchContext
    assert manager.cache.get(first) is None
    second = answer(context, [(BAR0, resp(7))]).session_id
    assert second not in (INVALID_SESSION_ID, first)
    assert manager.cache.session_ids() == {second}
    context = new_context(manager, FetchMetadata(first, 1))
    assert answer(context, {}).error_code == FETCH_SESSION_ID_NOT_FOUND


def test_incremental_fetch_with_session_id_zero_is_not_found() -> None:
    manager, _ = setup()
    context = new_context(manager, FetchMetadata(0, 1), [(FOO0, req(0))])
    assert type(context) is SessionErrorContext
    assert answer(context, {}) == FetchContextResponse(FETCH_SESSION_ID_NOT_FOUND, 0, ())


def test_full_and_error_contexts_are_not_throttled_into_a_session() -> None:
    manager, _ = setup()
    context = new_context(manager, INITIAL, [(FOO0, req(0))])
    assert context.throttled_response(30) == FetchContextResponse(0, 0, (), 30)
    assert manager.cache.size == 0


# --- epochs -----------------------------------------------------------------------------------


def test_epochs_advance_by_one_per_incremental_fetch() -> None:
    manager, _ = setup()
    session_id = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))])
    for epoch in range(1, 6):
        context = new_context(manager, FetchMetadata(session_id, epoch))
        assert answer(context, [(FOO0, resp(1))]) == FetchContextResponse(0, session_id, ())
    context = new_context(manager, FetchMetadata(session_id, 7))
    assert answer(context, {}).error_code == INVALID_FETCH_SESSION_EPOCH
    # A refused epoch changes nothing: 6 is still the expected one.
    assert type(new_context(manager, FetchMetadata(session_id, 6))) is IncrementalFetchContext


def test_epoch_wraps_from_int_max_to_one() -> None:
    manager, _ = setup()
    session_id = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))])
    manager.cache.get(session_id).epoch = MAX_EPOCH  # 2**31 - 2 fetches later
    context = new_context(manager, FetchMetadata(session_id, MAX_EPOCH))
    assert answer(context, [(FOO0, resp(2))]).partitions == ((FOO0, resp(2)),)
    assert manager.cache.get(session_id).epoch == 1
    context = new_context(manager, FetchMetadata(session_id, 1))
    assert answer(context, [(FOO0, resp(2))]) == FetchContextResponse(0, session_id, ())


def test_a_context_overtaken_by_the_next_epoch_answers_invalid_epoch() -> None:
    """Two requests of one session in flight: the first one's response is refused."""
    manager, _ = setup()
    session_id = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))])
    first = new_context(manager, FetchMetadata(session_id, 1))
    second = new_context(manager, FetchMetadata(session_id, 2))
    assert answer(first, [(FOO0, resp(9))]) == FetchContextResponse(
        INVALID_FETCH_SESSION_EPOCH, session_id, ()
    )
    assert first.throttled_response(5).error_code == INVALID_FETCH_SESSION_EPOCH
    assert answer(second, [(FOO0, resp(9))]).partitions == ((FOO0, resp(9)),)


# --- incremental responses --------------------------------------------------------------------


def test_incremental_response_carries_only_changed_partitions() -> None:
    manager, _ = setup()
    parts = [(TopicIdPartition(FOO_ID, "foo", p), req(p * 10)) for p in range(8)]
    p = [tip for tip, _ in parts]
    base = {tip: resp(100, 5) for tip in p}
    session_id = open_session(manager, parts, base.items())

    region = FileRegion(512)
    changed = dict(base)
    changed[p[1]] = resp(101, 5)  # high watermark moved
    changed[p[2]] = resp(100, 5, records=region)  # records
    changed[p[3]] = resp(100, 6)  # log start offset moved
    changed[p[4]] = resp(100, 5, error_code=UNKNOWN_TOPIC_OR_PARTITION)  # error, same offsets
    changed[p[5]] = resp(100, 5, preferred_read_replica=2)
    changed[p[6]] = resp(100, 5, diverging_epoch=EpochEndOffset(3, 90))
    changed[p[7]] = resp(100, 5, lso=60)  # only the LSO: not sent (Kafka's rule)
    changed[p[0]] = resp(100, 5, records=b"")  # empty records: not sent
    response = answer(new_context(manager, FetchMetadata(session_id, 1)), changed.items())
    assert response == FetchContextResponse(
        0, session_id, tuple((tip, changed[tip]) for tip in p[1:7])
    )
    assert response.partitions[1][1].records is region  # opaque: passed through as is
    # The partition that returned records is read last next time.
    context = new_context(manager, FetchMetadata(session_id, 2))
    assert tips(context) == [p[0], p[1], p[3], p[4], p[5], p[6], p[7], p[2]]

    # Same results again: HW and log start are remembered; records, errors, preferred replica
    # and diverging epochs are always sent.
    response = answer(context, changed.items())
    assert [tip for tip, _ in response.partitions] == [p[2], p[4], p[5], p[6]]

    # The error is gone and the HW is the old one: sent, since an error resets the cached HW.
    recovered = dict(base)
    recovered[p[4]] = resp(100, 5)
    response = answer(new_context(manager, FetchMetadata(session_id, 3)), recovered.items())
    assert [tip for tip, _ in response.partitions] == [p[1], p[3], p[4]]
    response = answer(new_context(manager, FetchMetadata(session_id, 4)), recovered.items())
    assert response.partitions == ()


def test_kafka_deprioritizes_partitions_with_records_only() -> None:
    """Kafka: testDeprioritizesPartitionsWithRecordsOnly."""
    manager, _ = setup()
    t1, t2, t3 = (TopicIdPartition(FOO_ID, "foo", 1), BAR1, ZAR0)
    parts = [(t, req(100, 1000, 5, 4)) for t in (t1, t2, t3)]
    session_id = open_session(manager, parts, [(t, resp(50, 0)) for t in (t1, t2, t3)])
    context = new_context(manager, FetchMetadata(session_id, 1), parts)
    assert tips(context) == [t1, t2, t3]
    assert answer(context, {}).partitions == ()
    results = [
        (t1, resp(60, 0, lso=50)),
        (t2, resp(60, 0, lso=50, records=b"x" * 70)),
        (t3, resp(50, 0)),
    ]
    assert answer(context, results).partitions == tuple(results[:2])
    assert tips(new_context(manager, FetchMetadata(session_id, 2))) == [t1, t3, t2]


def test_kafka_diverging_epoch() -> None:
    """Kafka: testDivergingEpoch."""
    manager, _ = setup()
    parts = [(FOO1, req(100, 1000, 5, 4)), (BAR1, req(100, 1000, 5, 4))]
    diverging = EpochEndOffset(3, 90)
    results = {FOO1: resp(105, 0), BAR1: resp(105, 0, diverging_epoch=diverging)}
    session_id = open_session(manager, parts, results.items())
    context = new_context(manager, FetchMetadata(session_id, 1), parts)
    assert tips(answer(context, results)) == [BAR1]
    results[FOO1] = resp(105, 0, diverging_epoch=diverging)
    assert tips(answer(context, results)) == [FOO1, BAR1]
    results[FOO1] = resp(110, 0)
    assert tips(answer(context, results)) == [FOO1, BAR1]


def test_incremental_request_updates_cached_parameters() -> None:
    """Kafka: testCachedLeaderEpoch and testLastFetchedEpoch."""
    manager, _ = setup()
    parts = [(FOO0, req(0)), (FOO1, req(10, leader_epoch=1)), (BAR1, req(10, 100, 2, 1))]
    results = [(FOO0, resp(100)), (FOO1, resp(10)), (BAR1, resp(5))]
    session_id = open_session(manager, parts, results)
    context = new_context(manager, FetchMetadata(session_id, 1))
    assert context.partitions == tuple(parts)
    answer(context, results)
    parts3 = [(FOO0, req(0, leader_epoch=6)), (FOO1, req(10)), (BAR1, req(10, 100, 3, 2))]
    context = new_context(manager, FetchMetadata(session_id, 2), parts3)
    assert context.partitions == tuple(parts3)


def test_new_partitions_join_the_session_at_the_end() -> None:
    manager, _ = setup()
    session_id = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))])
    context = new_context(manager, FetchMetadata(session_id, 1), [(BAR0, req(3)), (FOO0, req(2))])
    assert context.partitions == ((FOO0, req(2)), (BAR0, req(3)))
    response = answer(context, [(FOO0, resp(1)), (BAR0, resp(4))])
    assert response.partitions == ((BAR0, resp(4)),)  # new: its cached HW is -1


# --- forgotten topics -------------------------------------------------------------------------


def test_forgotten_partitions_leave_the_session() -> None:
    manager, _ = setup()
    parts = [(FOO0, req(0)), (FOO1, req(1)), (BAR0, req(2))]
    session_id = open_session(manager, parts, [(t, resp(9)) for t, _ in parts])
    context = new_context(manager, FetchMetadata(session_id, 1), forgotten=[FOO1, ZAR0])
    assert tips(context) == [FOO0, BAR0]
    assert manager.cache.get(session_id).size == 2


def test_kafka_zero_size_fetch_session() -> None:
    """Kafka: testZeroSizeFetchSession: forgetting every partition closes the session."""
    manager, _ = setup()
    session_id = open_session(
        manager, [(FOO0, req(0)), (FOO1, req(10))], [(FOO0, resp(100)), (FOO1, resp(10))]
    )
    context = new_context(manager, FetchMetadata(session_id, 1), forgotten=[FOO0, FOO1])
    assert type(context) is SessionlessFetchContext
    assert answer(context, {}) == FetchContextResponse(0, INVALID_SESSION_ID, ())
    assert manager.cache.size == 0
    assert manager.cache.total_partitions == 0


@pytest.mark.parametrize("starts_resolved", [True, False])
@pytest.mark.parametrize("ends_resolved", [True, False])
def test_kafka_to_forget_partitions(starts_resolved: bool, ends_resolved: bool) -> None:
    """Kafka: testToForgetPartitions: a partition is forgotten by topic id, name known or not."""
    manager, _ = setup()
    foo_unresolved = TopicIdPartition(FOO_ID, None, 0)
    bar_unresolved = TopicIdPartition(BAR_ID, None, 0)
    first = FOO0 if starts_resolved else foo_unresolved
    context = new_context(manager, INITIAL, [(first, req(0)), (bar_unresolved, req(0))], names={})
    response = answer(context, [(first, resp(10)), (bar_unresolved, err(UNKNOWN_TOPIC_ID))])
    session_id = response.session_id
    forget = FOO0 if ends_resolved else foo_unresolved
    names2 = {FOO_ID: "foo"} if ends_resolved else {}
    context = new_context(manager, FetchMetadata(session_id, 1), forgotten=[forget], names=names2)
    assert type(context) is IncrementalFetchContext
    assert tips(context) == [bar_unresolved]
    answer(context, [(bar_unresolved, err(UNKNOWN_TOPIC_ID))])
    context = new_context(manager, FetchMetadata(session_id, 2), forgotten=[BAR0], names={})
    assert type(context) is SessionlessFetchContext
    assert context.partitions == ()


# --- topic ids --------------------------------------------------------------------------------


def test_topic_name_session_continues_with_names() -> None:
    manager, _ = setup()
    foo0 = TopicIdPartition.by_name("foo", 0)
    session_id = open_session(manager, [(foo0, req(0))], [(foo0, resp(5))], version=V12)
    context = new_context(manager, FetchMetadata(session_id, 1), version=V12, names={})
    assert type(context) is IncrementalFetchContext
    assert answer(context, [(foo0, resp(6))]).partitions == ((foo0, resp(6)),)
    context = new_context(
        manager, FetchMetadata(session_id, 2), forgotten=[foo0], version=V12, names={}
    )
    assert type(context) is SessionlessFetchContext


@pytest.mark.parametrize(("created", "continued"), [(V12, V13), (V13, V12)])
def test_kafka_topic_id_usage_must_not_change_within_a_session(created: int, continued: int):
    """Kafka: testIncrementalFetchSessionWithIdsWhenSessionDoesNotUseIds and the reverse."""
    manager, _ = setup()
    foo0 = FOO0 if created >= V13 else TopicIdPartition.by_name("foo", 0)
    session_id = open_session(manager, [(foo0, req(0))], [(foo0, resp(100))], version=created)
    context = new_context(manager, FetchMetadata(session_id, 1), version=continued)
    assert type(context) is SessionErrorContext
    assert answer(context, {}) == FetchContextResponse(FETCH_SESSION_TOPIC_ID_ERROR, 0, ())


def test_kafka_resolve_unknown_partitions() -> None:
    """Kafka: testResolveUnknownPartitions: names are filled in as the broker learns the ids
    and stay once known."""
    manager, _ = setup()
    unresolved = [TopicIdPartition(t.topic_id, None, 0) for t in (FOO0, BAR0, ZAR0)]
    foo_u, bar_u, zar_u = unresolved

    def respond(context: FetchContext) -> int:
        results = [
            (tip, err(UNKNOWN_TOPIC_ID) if tip.topic is None else resp(10)) for tip in tips(context)
        ]
        return answer(context, results).session_id

    context = new_context(manager, INITIAL, [(t, req(0)) for t in unresolved], names={})
    assert tips(context) == unresolved
    session_id = respond(context)
    steps = [
        ({FOO_ID: "foo"}, (), [FOO0, bar_u, zar_u]),
        ({FOO_ID: "foo", BAR_ID: "bar"}, [(BAR0, req(0))], [FOO0, BAR0, zar_u]),
        (NAMES, (), [FOO0, BAR0, ZAR0]),
        ({}, (), [FOO0, BAR0, ZAR0]),
    ]
    for epoch, (names, parts, expected) in enumerate(steps, start=1):
        context = new_context(manager, FetchMetadata(session_id, epoch), parts, names=names)
        assert type(context) is IncrementalFetchContext
        assert tips(context) == expected
        assert respond(context) == session_id


def test_kafka_unknown_topic_id_then_resolved() -> None:
    """Kafka: testFetchSessionWithUnknownId: partitions enter unresolved, with errors, and are
    answered by name once the broker knows their id."""
    manager, _ = setup()
    foo0_u, foo1_u, zar0_u = (
        TopicIdPartition(t.topic_id, None, t.partition) for t in (FOO0, FOO1, ZAR0)
    )
    parts = [(foo0_u, req(0)), (foo1_u, req(10)), (zar0_u, req(10))]
    context = new_context(manager, INITIAL, parts, names={BAR_ID: "bar"})
    errors = [(t, err(UNKNOWN_TOPIC_ID)) for t, _ in parts]
    response = answer(context, errors)
    assert [r.error_code for _, r in response.partitions] == [UNKNOWN_TOPIC_ID] * 3
    context = new_context(
        manager, FetchMetadata(response.session_id, 1), names={FOO_ID: "foo", BAR_ID: "bar"}
    )
    assert tips(context) == [FOO0, FOO1, zar0_u]
    results = [(FOO0, resp(100)), (FOO1, resp(10)), (zar0_u, err(UNKNOWN_TOPIC_ID))]
    assert answer(context, results).partitions == tuple(results)


# --- misuse -----------------------------------------------------------------------------------


def test_responses_for_partitions_never_asked_for_are_refused() -> None:
    manager, _ = setup()
    context = new_context(manager, INITIAL, [(FOO0, req(0))])
    with pytest.raises(FetchSessionMisuseError, match="bar-0, which the full fetch did not"):
        answer(context, [(BAR0, resp(1))])
    session_id = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))])
    context = new_context(manager, FetchMetadata(session_id, 1))
    match = f"bar-0, which is not in fetch session {session_id}"
    with pytest.raises(FetchSessionMisuseError, match=match):
        answer(context, [(FOO0, resp(2)), (BAR0, resp(1))])
    assert manager.cache.get(session_id).partitions[FOO0.session_key].high_watermark == 1


# --- the cache: limits and eviction -----------------------------------------------------------


def dummy(size: int):
    def create() -> dict:
        tips_ = [TopicIdPartition(uuid.UUID(int=i + 1), "test", i) for i in range(size)]
        return {t.session_key: CachedPartition(t, req(0)) for t in tips_}

    return create


def assert_cache_contains(cache: FetchSessionCache, *ids: int) -> None:
    assert cache.session_ids() == frozenset(ids)


def test_kafka_new_session_ids_are_positive() -> None:
    """Kafka: testNewSessionId."""
    cache = FetchSessionCache(3, 100)
    assert all(0 < cache.new_session_id() < 2**31 - 1 for _ in range(10_001))


def test_kafka_session_cache() -> None:
    """Kafka: testSessionCache: eviction at 3 slots, eviction_ms 100."""
    cache = FetchSessionCache(3, 100)
    id1 = cache.maybe_create_session(0, False, 10, True, dummy(10))
    id2 = cache.maybe_create_session(10, False, 20, True, dummy(20))
    id3 = cache.maybe_create_session(20, False, 30, True, dummy(30))
    # Full, nobody stale, nobody evictable (all created less than 100 ms before last use).
    assert cache.maybe_create_session(30, False, 40, True, dummy(40)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(40, False, 5, True, dummy(5)) == INVALID_SESSION_ID
    assert_cache_contains(cache, id1, id2, id3)
    cache.touch(cache.get(id1), 200)
    # id2, last used at 10, is stale at 210.
    id4 = cache.maybe_create_session(210, False, 11, True, dummy(11))
    assert_cache_contains(cache, id1, id3, id4)
    cache.touch(cache.get(id1), 400)
    cache.touch(cache.get(id3), 390)
    cache.touch(cache.get(id4), 400)
    # Nobody stale; all evictable; the smallest (id1, 10 partitions) is worth less than 50.
    id5 = cache.maybe_create_session(410, False, 50, True, dummy(50))
    assert_cache_contains(cache, id3, id4, id5)
    # 5 partitions are worth less than id4's 11 ...
    assert cache.maybe_create_session(410, False, 5, True, dummy(5)) == INVALID_SESSION_ID
    # ... unless privileged: a follower's session evicts the least valuable consumer session.
    id6 = cache.maybe_create_session(410, True, 5, True, dummy(5))
    assert_cache_contains(cache, id3, id5, id6)
    assert cache.evictions == 3


def test_kafka_resize_cached_sessions() -> None:
    """Kafka: testResizeCachedSessions: the partition total follows sizes recorded at use."""
    cache = FetchSessionCache(2, 100)
    assert (cache.total_partitions, cache.size, cache.evictions) == (0, 0, 0)
    id1 = cache.maybe_create_session(0, False, 2, True, dummy(2))
    session1 = cache.get(id1)
    assert (session1.size, cache.total_partitions, cache.size) == (2, 2, 1)
    id2 = cache.maybe_create_session(0, False, 4, True, dummy(4))
    session2 = cache.get(id2)
    assert (cache.total_partitions, cache.size, cache.evictions) == (6, 2, 0)
    cache.touch(session1, 200)
    cache.touch(session2, 200)
    id3 = cache.maybe_create_session(200, False, 5, True, dummy(5))
    assert_cache_contains(cache, id2, id3)
    assert (cache.total_partitions, cache.size, cache.evictions) == (9, 2, 1)
    cache.remove(id3)
    assert_cache_contains(cache, id2)
    assert (cache.total_partitions, cache.size, cache.evictions) == (4, 1, 1)
    session2.partitions.pop(next(iter(session2.partitions)))
    assert (session2.size, session2.cached_size) == (3, 4)
    cache.touch(session2, session2.last_used_ms)
    assert cache.total_partitions == 3


FOO_PARTS = [(FOO0, req(0)), (FOO1, req(10))]
FOO_RESULTS = [(FOO0, resp(100)), (FOO1, resp(10))]


def test_kafka_fetch_session_expiration() -> None:
    """Kafka: testFetchSessionExpiration: the least recently used session goes once stale."""
    manager, clock = setup(slots=2, eviction_ms=1000)
    cache = manager.cache
    session1 = open_session(manager, FOO_PARTS, FOO_RESULTS)
    clock.sleep(500)
    session2 = open_session(manager, FOO_PARTS, FOO_RESULTS)
    assert_cache_contains(cache, session1, session2)
    clock.sleep(500)
    context = new_context(manager, FetchMetadata(session1, 1))  # session 1 used at 1000
    assert type(context) is IncrementalFetchContext
    clock.sleep(501)
    session3 = open_session(manager, FOO_PARTS, FOO_RESULTS)  # session 2 (used at 500) is stale
    assert_cache_contains(cache, session1, session3)


def test_kafka_privileged_session_handling() -> None:
    """Kafka: testPrivilegedSessionHandling: a follower's session evicts a consumer's, and a
    privileged session still goes once stale."""
    manager, clock = setup(slots=2, eviction_ms=1000)
    cache = manager.cache
    session1 = open_session(manager, FOO_PARTS, FOO_RESULTS, follower=True)
    clock.sleep(500)
    session2 = open_session(manager, FOO_PARTS, FOO_RESULTS, follower=False)
    assert_cache_contains(cache, session1, session2)
    clock.sleep(500)
    session3 = open_session(manager, FOO_PARTS, FOO_RESULTS, follower=True)
    assert_cache_contains(cache, session1, session3)
    clock.sleep(501)
    session4 = open_session(manager, FOO_PARTS, FOO_RESULTS, follower=True)
    assert_cache_contains(cache, session3, session4)


def test_unprivileged_session_cannot_evict_a_follower_unless_stale() -> None:
    manager, clock = setup(slots=1, eviction_ms=1000)
    follower = open_session(manager, [(FOO0, req(0))], [(FOO0, resp(1))], follower=True)
    clock.sleep(1500)
    answer(new_context(manager, FetchMetadata(follower, 1)), {})  # used: old, not stale
    many = [(TopicIdPartition(FOO_ID, "foo", p), req(0)) for p in range(50)]
    context = new_context(manager, INITIAL, many)
    assert answer(context, [(t, resp(1)) for t, _ in many]).session_id == INVALID_SESSION_ID
    assert_cache_contains(manager.cache, follower)
    clock.sleep(1001)
    context = new_context(manager, INITIAL, many)
    assert answer(context, [(t, resp(1)) for t, _ in many]).session_id != INVALID_SESSION_ID
    assert manager.cache.get(follower) is None


def test_equal_sized_consumer_session_does_not_evict() -> None:
    manager, clock = setup(slots=1, eviction_ms=1000)
    first = open_session(manager, FOO_PARTS, FOO_RESULTS)
    clock.sleep(1001)
    answer(new_context(manager, FetchMetadata(first, 1)), {})
    clock.sleep(10)
    context = new_context(manager, INITIAL, FOO_PARTS)
    assert answer(context, FOO_RESULTS).session_id == INVALID_SESSION_ID  # same size: kept
    context = new_context(manager, INITIAL, FOO_PARTS + [(BAR0, req(0))])
    second = answer(context, FOO_RESULTS + [(BAR0, resp(1))]).session_id
    assert_cache_contains(manager.cache, second)  # one partition more: evicts


def test_no_room_full_fetch_still_answers_with_session_id_zero() -> None:
    for slots in (0, 1):
        manager, _ = setup(slots=slots)
        if slots:
            open_session(manager, FOO_PARTS, FOO_RESULTS)
        context = new_context(manager, INITIAL, [(BAR0, req(0))])
        response = answer(context, [(BAR0, resp(7))])
        assert response == FetchContextResponse(0, INVALID_SESSION_ID, ((BAR0, resp(7)),))
        assert manager.cache.size == slots


def test_partitions_per_session_limit() -> None:
    manager, _ = setup(max_partitions_per_session=2)
    three = FOO_PARTS + [(BAR0, req(0))]
    context = new_context(manager, INITIAL, three)
    response = answer(context, FOO_RESULTS + [(BAR0, resp(1))])
    assert (response.session_id, len(response.partitions)) == (INVALID_SESSION_ID, 3)
    session_id = open_session(manager, FOO_PARTS, FOO_RESULTS)
    context = new_context(manager, FetchMetadata(session_id, 1), [(BAR0, req(0))])
    assert answer(context, {}) == FetchContextResponse(FETCH_SESSION_ID_NOT_FOUND, 0, ())
    assert manager.cache.size == 0
    assert manager.cache.total_partitions == 0


def test_cached_partitions_limit_evicts_only_stale_sessions() -> None:
    manager, clock = setup(slots=10, eviction_ms=1000, max_cached_partitions=5)
    cache = manager.cache
    first = open_session(manager, FOO_PARTS, FOO_RESULTS)  # 2 partitions, t=0
    clock.sleep(600)
    second = open_session(manager, FOO_PARTS, FOO_RESULTS)  # 4, t=600
    three = [(FOO0, req(0)), (FOO1, req(0)), (BAR0, req(0))]
    results = [(t, resp(1)) for t, _ in three]
    # 4 + 3 > 5 and nobody is stale: no session, the fetch is answered all the same.
    response = answer(new_context(manager, INITIAL, three), results)
    assert (response.session_id, len(response.partitions)) == (INVALID_SESSION_ID, 3)
    assert_cache_contains(cache, first, second)
    # An incremental fetch growing a session past the total closes it.
    context = new_context(manager, FetchMetadata(second, 1), [(BAR0, req(0)), (BAR1, req(0))])
    assert answer(context, {}) == FetchContextResponse(FETCH_SESSION_ID_NOT_FOUND, 0, ())
    assert (cache.session_ids(), cache.total_partitions) == ({first}, 2)
    second = open_session(manager, FOO_PARTS, FOO_RESULTS)
    clock.sleep(1001)  # the first is stale (last used at 0), the second is not (600)
    third = open_session(manager, three, results)
    assert_cache_contains(cache, second, third)
    assert cache.total_partitions == 5


def test_cache_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="cache.slots=-1"):
        FetchSessionCache(-1)
    with pytest.raises(ValueError, match="eviction ms -5"):
        FetchSessionCache(10, -5)
    with pytest.raises(ValueError, match="per fetch session 0"):
        FetchSessionCache(10, 5, 0)
    with pytest.raises(ValueError, match="max cached fetch session partitions 0 < 1"):
        FetchSessionCache(10, 5, 10, 0)


def test_exhausted_session_ids_raise() -> None:
    class SameId(random.Random):
        def randrange(self, *args, **kwargs) -> int:
            return 42

    cache = FetchSessionCache(3, 100, rng=SameId())
    assert cache.maybe_create_session(0, False, 1, True, dummy(1)) == 42
    with pytest.raises(FetchSessionMisuseError, match="no free fetch session id after 64"):
        cache.maybe_create_session(0, False, 1, True, dummy(1))


# --- bounded cache under generated request sequences ------------------------------------------

SLOTS = 3
EVICTION_MS = 100
PARTS = [TopicIdPartition(FOO_ID, "foo", p) for p in range(6)]


class SessionCacheMachine(RuleBasedStateMachine):
    """Clients open, use and close sessions against a 3-slot cache while time passes. The
    machine keeps each client's view (session id, next epoch) and a model of Kafka's eviction."""

    @initialize()
    def start(self) -> None:
        self.clock = FakeClock()
        self.manager = FetchManager(
            FetchSessionCache(SLOTS, EVICTION_MS, rng=random.Random(3)), self.clock
        )
        self.clients: dict[int, int] = {}  # session id -> next epoch
        self.model: dict[int, dict] = {}  # session id -> Kafka's bookkeeping
        self.evicted: set[int] = set()

    def _model_evict(self, now: int, privileged: bool, size: int) -> int | None | bool:
        """Kafka's choice: the id to evict, None when there is room, False when refused."""
        if len(self.model) < SLOTS:
            return None
        lru = min(self.model, key=lambda i: (self.model[i]["used"], i))
        if now - self.model[lru]["used"] > EVICTION_MS:
            return lru
        flag = "by_privileged" if privileged else "by_all"
        evictable = [i for i in self.model if self.model[i][flag]]
        if not evictable:
            return False
        key = lambda i: (self.model[i]["privileged"], self.model[i]["size"], i)  # noqa: E731
        victim = min(evictable, key=key)
        return victim if (privileged, size, 0) >= key(victim) else False

    def _model_touch(self, session_id: int, now: int, size: int) -> None:
        entry = self.model[session_id]
        old = now - entry["created"] > EVICTION_MS
        entry.update(used=now, size=size, by_all=old, by_privileged=old or not entry["privileged"])

    @rule(size=st.integers(1, 6), follower=st.booleans())
    def open(self, size: int, follower: bool) -> None:
        parts = [(tip, req(0)) for tip in PARTS[:size]]
        now = self.clock.now
        expected = self._model_evict(now, follower, size)
        context = new_context(self.manager, INITIAL, parts, follower=follower)
        session_id = answer(context, [(tip, resp(1)) for tip, _ in parts]).session_id
        if expected is False:
            assert session_id == INVALID_SESSION_ID
            return
        assert session_id != INVALID_SESSION_ID and session_id not in self.model
        if expected is not None:
            del self.model[expected]
            self.evicted.add(expected)
        self.evicted.discard(session_id)  # an id drawn again belongs to the new session
        self.model[session_id] = {"created": now, "privileged": follower}
        self._model_touch(session_id, now, size)
        self.clients[session_id] = 1

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), forget=st.integers(0, 2))
    def fetch(self, data: st.DataObject, forget: int) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.clients)))
        epoch = self.clients[session_id]
        forgotten = PARTS[:forget]
        context = new_context(self.manager, FetchMetadata(session_id, epoch), forgotten=forgotten)
        response = answer(context, [(tip, resp(2)) for tip in tips(context)])
        if session_id in self.evicted:
            assert response == FetchContextResponse(FETCH_SESSION_ID_NOT_FOUND, 0, ())
            del self.clients[session_id]
            return
        remaining = self.manager.cache.get(session_id)
        if remaining is None:  # every partition forgotten: closed, answered sessionless
            assert type(context) is SessionlessFetchContext
            del self.model[session_id], self.clients[session_id]
            return
        assert response.error_code == 0 and response.session_id == session_id
        self._model_touch(session_id, self.clock.now, remaining.size)
        self.clients[session_id] = next_epoch(epoch)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def stale_epoch(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.clients)))
        metadata = FetchMetadata(session_id, self.clients[session_id] + 1)
        code = answer(new_context(self.manager, metadata), {}).error_code
        expected = FETCH_SESSION_ID_NOT_FOUND if session_id in self.evicted else 71
        assert code == expected

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.clients)))
        context = new_context(self.manager, FetchMetadata(session_id, FINAL_EPOCH))
        assert type(context) is SessionlessFetchContext
        self.model.pop(session_id, None)
        del self.clients[session_id]

    @rule(ms=st.sampled_from([0, 1, 50, 100, 101, 250]))
    def wait(self, ms: int) -> None:
        self.clock.sleep(ms)

    @invariant()
    def bounded_unique_nonzero(self) -> None:
        ids = self.manager.cache.session_ids()
        assert len(ids) <= SLOTS
        assert INVALID_SESSION_ID not in ids
        assert ids == frozenset(self.model)
        assert not ids & self.evicted
        sizes = sum(self.manager.cache.get(i).size for i in ids)
        assert self.manager.cache.total_partitions == sizes


SessionCacheMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestSessionCacheMachine = SessionCacheMachine.TestCase


# --- threads ----------------------------------------------------------------------------------


def test_handler_threads_share_the_cache() -> None:
    """Four threads, each a client that opens a session and fetches incrementally, against a
    2-slot cache: every answer is one of the protocol's, and the cache stays bounded."""
    manager = FetchManager(FetchSessionCache(2, 0, rng=random.Random(5)))
    failures: list[BaseException] = []

    def client(n: int) -> None:
        try:
            parts = [(TopicIdPartition(FOO_ID, "foo", p), req(0)) for p in range(n + 1)]
            metadata = INITIAL
            for _ in range(300):
                context = new_context(manager, metadata, parts if metadata.is_full else ())
                response = answer(context, [(t, resp(1)) for t in tips(context)])
                assert response.error_code in (0, FETCH_SESSION_ID_NOT_FOUND)
                assert manager.cache.size <= 2
                if response.error_code or response.session_id == INVALID_SESSION_ID:
                    metadata = INITIAL
                elif metadata.is_full:
                    metadata = FetchMetadata(response.session_id, 1)
                else:
                    metadata = metadata.next_incremental()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert manager.cache.size <= 2
