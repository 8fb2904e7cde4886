"""Replica placement for new topics and partitions (Kafka's ``AdminUtils.assignReplicasToBrokers``).

Without racks (every broker's rack is ``None``), over the broker ids in ascending order
(``brokers[0..n-1]``, as Kafka's ``AdminZkClient.getBrokerMetadatas`` passes them):

- ``start_index`` (random in ``[0, n)`` unless given) places partition ``p``'s leader on
  ``brokers[(start_index + p) % n]``: leaders go round-robin over the brokers.
- ``replica_shift`` (random unless given; when only ``start_index`` is given it defaults to it, as
  Kafka's ``fixedStartIndex`` sets both) grows by one each time ``p`` wraps around the broker list
  (``p > 0 and p % n == 0``), so consecutive rounds put followers at different distances.
- Follower ``j`` (0-based) of a partition whose leader index is ``first`` is at
  ``(first + 1 + (shift + j) % (n - 1)) % n`` (Kafka's ``replicaIndex``): never the leader, and
  distinct for ``j < n - 1``.

With racks (every broker has one), the brokers are first rearranged so that racks alternate:
the racks sorted by name are visited round-robin, taking each rack's next broker (lowest id
first) until all are placed, e.g. racks ``a: 0,1,2`` and ``b: 3,4,5`` give ``0,3,1,4,2,5``.
Leaders go round-robin over that list as above; followers walk ``replicaIndex`` with the shift
multiplied by the number of racks and an index ``k`` that keeps growing across the partition's
followers, skipping a broker whose rack already holds a replica while some rack holds none, and a
broker that already holds a replica while some broker holds none (Kafka's
``assignReplicasToBrokersRackAware``). So a partition's replicas span ``min(rf, racks)`` racks.
Brokers with a rack beside brokers without one are an :class:`AdminOperationError`, as in Kafka.

New partitions of an existing topic (:func:`assign_replicas_to_new_partitions`) continue Kafka's
scheme: replication factor of partition 0, partition ids from the current count, and start
index and shift both the position of the first broker whose id is at least partition 0's leader.

Pure functions over immutable inputs: thread-safe. Randomness comes from ``rng`` (default: the
``random`` module's shared generator).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker_embedded.errors import (
    AdminOperationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)

Assignment = dict[int, list[int]]


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker as replica placement sees it: its id and its rack (``None`` when unknown)."""

    id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Iterable[BrokerMetadata | int],
    n_partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    start_partition_id: int = 0,
    rng: random.Random | None = None,
    topic: str | None = None,
) -> Assignment:
    """Map partition ids ``start_partition_id ..`` to their replica lists, leader first.

    ``brokers`` are :class:`BrokerMetadata` or bare ids (no rack). ``start_index`` and
    ``replica_shift`` fix Kafka's random choices (tests, reproducible plans); ``topic`` only
    names the topic in error messages. Raises :class:`InvalidPartitionsError`,
    :class:`InvalidReplicationFactorError` or :class:`AdminOperationError`.
    """
    metas = _normalize_brokers(brokers)
    _validate(len(metas), n_partitions, replication_factor, topic)
    if start_partition_id < 0:
        raise InvalidPartitionsError(
            f"{_topic_prefix(topic)}first partition id {start_partition_id} is negative"
        )
    n = len(metas)
    if replica_shift is None:
        replica_shift = start_index if start_index is not None else (rng or random).randrange(n)
    if start_index is None:
        start_index = (rng or random).randrange(n)
    _check_non_negative("start index", start_index, topic)
    _check_non_negative("replica shift", replica_shift, topic)
    racks = _racks(metas)
    if racks is None:
        ids = [m.id for m in metas]
        follow = _rack_unaware_followers
    else:
        ids = rack_alternated_broker_list(racks)
        follow = _rack_aware_followers(racks)
    result: Assignment = {}
    shift = replica_shift
    for p in range(start_partition_id, start_partition_id + n_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        result[p] = [ids[first], *follow(ids, first, shift, replication_factor - 1)]
    return result


def assign_replicas_to_new_partitions(
    brokers: Iterable[BrokerMetadata | int],
    existing: Mapping[int, Sequence[int]],
    new_partition_count: int,
    *,
    topic: str | None = None,
) -> Assignment:
    """Replicas for partitions ``len(existing) .. new_partition_count - 1`` of a topic that has
    ``existing`` (partition -> replicas, leader first), as Kafka's ``createPartitions`` places them.

    Only the new partitions are returned. Raises :class:`InvalidPartitionsError` when the count
    does not grow, and :class:`AdminOperationError` when ``existing`` has no partition 0.
    """
    if 0 not in existing or not existing[0]:
        raise AdminOperationError(
            f"{_topic_prefix(topic)}the existing assignment has no replicas for partition 0"
        )
    to_add = new_partition_count - len(existing)
    if to_add <= 0:
        raise InvalidPartitionsError(
            f"{_topic_prefix(topic)}the number of partitions can only be increased: the topic "
            f"has {len(existing)} partitions, {new_partition_count} would not be an increase"
        )
    metas = _normalize_brokers(brokers)
    leader0 = existing[0][0]
    start = next((i for i, m in enumerate(metas) if m.id >= leader0), 0)
    return assign_replicas_to_brokers(
        metas,
        to_add,
        len(existing[0]),
        start_index=start,
        replica_shift=start,
        start_partition_id=len(existing),
        topic=topic,
    )


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Broker ids ordered so that racks alternate: racks by name round-robin, each rack's
    brokers by ascending id (Kafka's ``getRackAlternatedBrokerList``)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(broker_racks):
        by_rack.setdefault(broker_racks[broker_id], []).append(broker_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(broker_racks):
        result.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return result


def replica_index(first_replica_index: int, second_replica_shift: int, index: int, n: int) -> int:
    """Kafka's ``replicaIndex``: the broker-list position of a partition's follower ``index``."""
    shift = 1 + (second_replica_shift + index) % (n - 1)
    return (first_replica_index + shift) % n


# -- helpers -------------------------------------------------------------------------------------


def _topic_prefix(topic: str | None) -> str:
    return f"topic {topic!r}: " if topic is not None else ""


def _check_non_negative(what: str, value: int, topic: str | None) -> None:
    if value < 0:
        raise ValueError(f"{_topic_prefix(topic)}{what} {value} is negative")


def _normalize_brokers(brokers: Iterable[BrokerMetadata | int]) -> list[BrokerMetadata]:
    metas = [b if isinstance(b, BrokerMetadata) else BrokerMetadata(b) for b in brokers]
    metas.sort(key=lambda m: m.id)
    for a, b in zip(metas, metas[1:], strict=False):
        if a.id == b.id:
            raise AdminOperationError(f"broker id {a.id} is listed more than once")
    return metas


def _validate(
    n_brokers: int, n_partitions: int, replication_factor: int, topic: str | None
) -> None:
    prefix = _topic_prefix(topic)
    if n_partitions <= 0:
        raise InvalidPartitionsError(
            f"{prefix}number of partitions must be larger than 0, got {n_partitions}"
        )
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"{prefix}replication factor must be larger than 0, got {replication_factor}"
        )
    if replication_factor > n_brokers:
        raise InvalidReplicationFactorError(
            f"{prefix}replication factor: {replication_factor} larger than available brokers: "
            f"{n_brokers}"
        )


def _racks(metas: list[BrokerMetadata]) -> dict[int, str] | None:
    """Broker id -> rack when every broker has one, ``None`` when none has one."""
    with_rack = [m for m in metas if m.rack is not None]
    if not with_rack:
        return None
    if len(with_rack) != len(metas):
        missing = [m.id for m in metas if m.rack is None]
        raise AdminOperationError(
            "not all brokers have rack information for replica rack aware assignment: "
            f"brokers {missing} have none"
        )
    return {m.id: m.rack for m in with_rack if m.rack is not None}


def _rack_unaware_followers(ids: list[int], first: int, shift: int, count: int) -> list[int]:
    return [ids[replica_index(first, shift, j, len(ids))] for j in range(count)]


def _rack_aware_followers(racks: dict[int, str]):
    n_racks = len(set(racks.values()))

    def followers(ids: list[int], first: int, shift: int, count: int) -> list[int]:
        n = len(ids)
        chosen = [ids[first]]
        used_racks = {racks[ids[first]]}
        k = 0
        while len(chosen) <= count:
            broker = ids[replica_index(first, shift * n_racks, k, n)]
            k += 1
            rack = racks[broker]
            if rack in used_racks and len(used_racks) < n_racks:
                continue
            if broker in chosen and len(chosen) < n:
                continue
            chosen.append(broker)
            used_racks.add(rack)
        return chosen[1:]

    return followers
