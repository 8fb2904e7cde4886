"""Consumer groups over the wire with real clients (confluent-kafka, kafka-python, the admin
client): rebalances when members join, leave or die, exactly-once consumption with commits
after processing, resuming from committed offsets, static membership."""

from __future__ import annotations

import collections

import pytest

from tests.broker_embedded.server._groups import (
    GROUP_BROKER_CONFIG,
    TIMEOUT_S,
    assignments,
    consumer_config,
    poll_until,
    produce,
)
from tests.broker_embedded.server._serve import served

ck = pytest.importorskip("confluent_kafka")

TOPIC = "events"


def _create(bootstrap: str, partitions: int = 6) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    futures[TOPIC].result(TIMEOUT_S)


class Ledger:
    """Every record a consumer processed, committed right after processing."""

    def __init__(self) -> None:
        self.seen: collections.Counter = collections.Counter()

    def __call__(self, consumer, message) -> None:
        self.seen[(message.partition(), message.value())] += 1
        consumer.commit(message=message, asynchronous=False)


def test_three_members_share_six_partitions_and_take_over_from_one_that_leaves(tmp_path):
    with served(tmp_path, **GROUP_BROKER_CONFIG) as s:
        _create(s.bootstrap)
        sent = produce(s.bootstrap, TOPIC, 6, 20, "a")
        consumers = [ck.Consumer(consumer_config(s.bootstrap, "g1")) for _ in range(3)]
        try:
            for c in consumers:
                c.subscribe([TOPIC])
            ledger = Ledger()
            poll_until(consumers, lambda: sorted(map(len, assignments(consumers))) == [2, 2, 2]
                       and sum(ledger.seen.values()) == len(sent), ledger)  # fmt: skip
            owned = sorted(p for a in assignments(consumers) for p in a)
            assert owned == [0, 1, 2, 3, 4, 5]
            consumers.pop().close()  # LeaveGroup: the other two take over its partitions
            poll_until(consumers, lambda: sorted(map(len, assignments(consumers))) == [3, 3])
            sent |= produce(s.bootstrap, TOPIC, 6, 10, "b")
            poll_until(consumers, lambda: sum(ledger.seen.values()) == len(sent), ledger)
            assert set(ledger.seen) == sent
            assert set(ledger.seen.values()) == {1}  # each record exactly once
        finally:
            for c in consumers:
                c.close()
