"""Replica placement: exact assignments worked through by hand from Kafka's algorithm, errors, and
properties (distinct replicas, balanced leaders, rack spread)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import (
    AdminOperationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaApiError,
)
from broker_embedded.replication.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
    assign_replicas_to_new_partitions,
    rack_alternated_broker_list,
    replica_index,
)


def racked(racks: dict[int, str]) -> list[BrokerMetadata]:
    return [BrokerMetadata(b, r) for b, r in racks.items()]


# -- known answers (each worked by hand; see the comments) -----------------------------------------


def test_replica_index_formula() -> None:
    # 1 + (shift + j) % (n - 1) positions after the leader, wrapping around.
    assert replica_index(0, 0, 0, 5) == 1
    assert replica_index(3, 0, 1, 5) == 0  # 3 + 2 = 5 -> 0
    assert replica_index(4, 1, 0, 6) == 0  # 4 + 2 = 6 -> 0
    assert replica_index(2, 3, 2, 5) == 4  # 2 + 1 + 5 % 4 = 4


def test_five_brokers_start_zero() -> None:
    # n=5, start=shift=0. p0..p4: followers at +1, +2. p5 wraps: shift 1, followers at +2, +3.
    assert assign_replicas_to_brokers(range(5), 10, 3, start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_seed_note_example_start_at_broker_4() -> None:
    # The seed note: start at broker 4 of 6; leaders 4, 5, 0, ...; partition 0's followers on 5
    # and 0, partition 1's on 0 and 1. Partition 6 wraps: shift 1, followers at +2, +3.
    assert assign_replicas_to_brokers(range(6), 8, 3, start_index=4, replica_shift=0) == {
        0: [4, 5, 0],
        1: [5, 0, 1],
        2: [0, 1, 2],
        3: [1, 2, 3],
        4: [2, 3, 4],
        5: [3, 4, 5],
        6: [4, 0, 1],
        7: [5, 1, 2],
    }


def test_start_index_alone_also_fixes_the_shift() -> None:
    # Kafka's fixedStartIndex sets both: start 1, shift 1 over 4 brokers, rf 2.
    # p0: leader 1, follower 1 + 1 + 1 % 3 = 3. p1: leader 2, follower 0. p3 leader 0, follower 2.
    assert assign_replicas_to_brokers([10, 11, 12, 13], 4, 2, start_index=1) == {
        0: [11, 13],
        1: [12, 10],
        2: [13, 11],
        3: [10, 12],
    }


def test_brokers_are_taken_in_id_order() -> None:
    a = assign_replicas_to_brokers([5, 1, 3], 3, 2, start_index=0)
    b = assign_replicas_to_brokers([1, 3, 5], 3, 2, start_index=0)
    assert a == b == {0: [1, 3], 1: [3, 5], 2: [5, 1]}


def test_rack_alternated_list_from_seed_note() -> None:
    racks = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2, 5]


def test_rack_alternated_list_uneven_racks() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    del racks[5]
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2]
    assert rack_alternated_broker_list({0: "a", 1: "a", 2: "a", 3: "a", 4: "b"}) == [0, 4, 1, 2, 3]


def test_rack_aware_seed_example() -> None:
    # List 0,3,1,4,2,5 (racks a,b alternate); start index 3 -> partition 0 led by broker 4, its
    # first follower broker 2 on the other rack (the seed note's example), then broker 5.
    # Partition 6 wraps: shift 1 * 2 racks, followers at +3, +4 of index 3 -> brokers 0, 3.
    racks = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    got = assign_replicas_to_brokers(racked(racks), 7, 3, start_index=3, replica_shift=0)
    assert got == {
        0: [4, 2, 5],
        1: [2, 5, 0],
        2: [5, 0, 3],
        3: [0, 3, 1],
        4: [3, 1, 4],
        5: [1, 4, 2],
        6: [4, 0, 3],
    }


def test_rack_aware_three_racks() -> None:
    # List 0,3,1,5,4,2 (rack1 0,5; rack2 3,4; rack3 1,2), start = shift = 0.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas_to_brokers(racked(racks), 7, 3, start_index=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_aware_skips_brokers_of_a_used_rack() -> None:
    # List 0,4,1,2,3 (rack a 0-3, rack b 4). Partition 2: leader 1 (a); candidates 2, 3, 0 are on
    # rack a, skipped while rack b holds nothing; broker 4 is taken at k = 3.
    racks = {0: "a", 1: "a", 2: "a", 3: "a", 4: "b"}
    got = assign_replicas_to_brokers(racked(racks), 5, 2, start_index=0)
    assert got == {0: [0, 4], 1: [4, 1], 2: [1, 4], 3: [2, 4], 4: [3, 4]}
    # Once both racks hold a replica, any unused broker will do.
    assert assign_replicas_to_brokers(racked(racks), 1, 3, start_index=0) == {0: [0, 4, 1]}


def test_new_partitions_continue_from_the_existing_start() -> None:
    # Leader of partition 0 is broker 1 -> start = shift = 1; partition 3 wraps (shift 2):
    # leader (3 + 1) % 3 = 1, follower 1 + 1 + 2 % 2 = 2. Partition 4: leader 2, follower 0.
    existing = {0: [1, 2], 1: [2, 0], 2: [0, 1]}
    assert assign_replicas_to_new_partitions(range(3), existing, 5) == {3: [1, 2], 4: [2, 0]}


def test_new_partitions_leader_not_a_current_broker() -> None:
    # Broker 4 is gone: start = shift = the index of the first broker with id >= 4, i.e. 6 at 1.
    # p2 (no wrap, shift 1): leader (2 + 1) % 3 = 0 -> 2, follower 0 + 1 + 1 % 2 = 2 -> 8.
    # p3 (wraps, shift 2): leader (3 + 1) % 3 = 1 -> 6, follower 1 + 1 + 2 % 2 = 2 -> 8.
    existing = {0: [4, 6], 1: [6, 2]}
    assert assign_replicas_to_new_partitions([2, 6, 8], existing, 4) == {2: [2, 8], 3: [6, 8]}


def test_new_partitions_do_not_replay_earlier_shift_increments() -> None:
    # Kafka restarts the shift at the start index, so after a full round the new partitions'
    # followers differ from a topic created at its final size: p4 of 3 brokers, start 0.
    whole = assign_replicas_to_brokers(range(3), 5, 2, start_index=0)
    assert whole[4] == [1, 0]  # shift 1 after the wrap at p3: follower 1 + 1 + 1 % 2 = 3 -> 0
    existing = {p: whole[p] for p in range(4)}
    # Continuing at p4 the shift is still 0 (no wrap seen): follower 1 + 1 + 0 = 2.
    assert assign_replicas_to_new_partitions(range(3), existing, 5) == {4: [1, 2]}


def test_random_choices_come_from_rng() -> None:
    a = assign_replicas_to_brokers(range(7), 20, 3, rng=random.Random(42))
    b = assign_replicas_to_brokers(range(7), 20, 3, rng=random.Random(42))
    assert a == b
    leaders = {assign_replicas_to_brokers(range(7), 1, 1)[0][0] for _ in range(200)}
    assert len(leaders) > 1  # random start when none is given


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [0, -1])
def test_partitions_must_be_positive(partitions: int) -> None:
    with pytest.raises(InvalidPartitionsError, match="larger than 0") as e:
        assign_replicas_to_brokers(range(3), partitions, 1, topic="t")
    assert "'t'" in str(e.value)
    assert (e.value.code, e.value.name) == (37, "INVALID_PARTITIONS")


@pytest.mark.parametrize(
    ("brokers", "rf", "match"),
    [
        (range(3), 0, "larger than 0"),
        (range(3), -2, "larger than 0"),
        (range(3), 4, "replication factor: 4 larger than available brokers: 3"),
        ([], 1, "available brokers: 0"),
    ],
)
def test_replication_factor_errors(brokers, rf: int, match: str) -> None:
    with pytest.raises(InvalidReplicationFactorError, match=match) as e:
        assign_replicas_to_brokers(brokers, 3, rf)
    assert isinstance(e.value, KafkaApiError)
    assert (e.value.code, e.value.name) == (38, "INVALID_REPLICATION_FACTOR")


def test_some_brokers_without_rack() -> None:
    brokers = [BrokerMetadata(0, "a"), BrokerMetadata(1), BrokerMetadata(2, "b")]
    with pytest.raises(AdminOperationError, match=r"not all brokers have rack.*\[1\]"):
        assign_replicas_to_brokers(brokers, 3, 2)


def test_duplicate_broker_ids() -> None:
    with pytest.raises(AdminOperationError, match="broker id 1"):
        assign_replicas_to_brokers([0, 1, 1], 3, 2)


def test_new_partitions_must_grow_the_topic() -> None:
    with pytest.raises(InvalidPartitionsError, match="has 2 partitions, 2 would not"):
        assign_replicas_to_new_partitions(range(3), {0: [0, 1], 1: [1, 2]}, 2, topic="t")
    with pytest.raises(AdminOperationError, match="partition 0"):
        assign_replicas_to_new_partitions(range(3), {1: [0, 1]}, 3)


# -- properties ------------------------------------------------------------------------------------


@st.composite
def placements(draw, racks: bool):
    ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    n = len(ids)
    if racks:
        names = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
        brokers = [BrokerMetadata(i, r) for i, r in zip(ids, names, strict=True)]
    else:
        brokers = [BrokerMetadata(i) for i in ids]
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 40))
    start = draw(st.integers(0, n - 1))
    shift = draw(st.integers(0, n - 1))
    return brokers, partitions, rf, start, shift


def check_common(brokers, partitions, rf, got) -> None:
    ids = {b.id for b in brokers}
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= ids
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=150, deadline=None)
@given(placements(racks=False))
def test_property_rack_unaware(case) -> None:
    brokers, partitions, rf, start, shift = case
    got = assign_replicas_to_brokers(
        brokers, partitions, rf, start_index=start, replica_shift=shift
    )
    check_common(brokers, partitions, rf, got)
    n = len(brokers)
    if partitions % n == 0:  # every full round is a permutation per replica position
        per_broker = Counter(b for r in got.values() for b in r)
        assert set(per_broker.values()) == {partitions * rf // n}


@settings(max_examples=150, deadline=None)
@given(placements(racks=True))
def test_property_rack_aware(case) -> None:
    brokers, partitions, rf, start, shift = case
    got = assign_replicas_to_brokers(
        brokers, partitions, rf, start_index=start, replica_shift=shift
    )
    check_common(brokers, partitions, rf, got)
    rack_of = {b.id: b.rack for b in brokers}
    n_racks = len(set(rack_of.values()))
    for replicas in got.values():
        assert len({rack_of[b] for b in replicas}) == min(rf, n_racks)


@settings(max_examples=100, deadline=None)
@given(placements(racks=False), st.integers(1, 30))
def test_property_new_partitions_extend_a_fixed_start_assignment(case, extra: int) -> None:
    # A topic created with start = shift = s keeps its round-robin leaders when it grows, and,
    # if it had at most one partition per broker, grows exactly as if created at its final size.
    brokers, partitions, rf, start, _ = case
    whole = assign_replicas_to_brokers(brokers, partitions + extra, rf, start_index=start)
    existing = {p: whole[p] for p in range(partitions)}
    added = assign_replicas_to_new_partitions(brokers, existing, partitions + extra)
    new = range(partitions, partitions + extra)
    assert sorted(added) == list(new)
    assert [added[p][0] for p in new] == [whole[p][0] for p in new]
    if partitions <= len(brokers):
        assert added == {p: whole[p] for p in new}
