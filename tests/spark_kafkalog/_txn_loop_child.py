"""A confluent-kafka consume-transform-produce loop, as a child process of the kill test:
``python -m tests.spark_kafkalog._txn_loop_child BOOTSTRAP TRANSACTIONAL_ID IN OUT PARTITIONS
SEED``.

It initializes its transactional producer (fencing a previous instance with the same id and
aborting its open transaction), takes the committed offsets of group ``ctp`` on every input
partition (read_committed), then repeats: consume up to :data:`BATCH` records, produce each one
transformed (value ``T:`` + input value, same key and partition) in a transaction, send the
consumed offsets to it (``send_offsets_to_transaction``), commit. A random pause of up to
:data:`PAUSE_S` between the produce and the commit widens the window a kill lands in. It prints
``ready`` once initialized, ``committed N`` after each commit and ``done`` when every input
partition is at its end with nothing consumed, then exits 0. Any client error exits 3 (the
test starts it again). Bounded: every client call has a timeout, and the loop stops after
:data:`DEADLINE_S`.
"""

from __future__ import annotations

import random
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

BATCH = 10
PAUSE_S = 0.03
TIMEOUT_S = 10.0
DEADLINE_S = 60.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def clients(bootstrap: str, transactional_id: str) -> tuple[Consumer, Producer]:
    bounded = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 5_000}
    producer = Producer(
        {
            **bounded,
            "transactional.id": transactional_id,
            "message.timeout.ms": 8_000,
            "transaction.timeout.ms": 20_000,
        }
    )
    consumer = Consumer(
        {
            **bounded,
            "group.id": "ctp",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    return consumer, producer


def run(bootstrap: str, transactional_id: str, source: str, sink: str, partitions: int) -> None:
    consumer, producer = clients(bootstrap, transactional_id)
    producer.init_transactions(TIMEOUT_S)
    consumer.assign([TopicPartition(source, p) for p in range(partitions)])
    say("ready")
    at_end: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        batch = []
        for m in consumer.consume(BATCH, 0.5):
            if m.error() is None:
                batch.append(m)
                at_end.discard(m.partition())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
            else:
                raise KafkaException(m.error())
        if not batch:
            if len(at_end) == partitions:
                say("done")
                consumer.close()
                return
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, key=m.key(), value=b"T:" + m.value(), partition=m.partition())
        time.sleep(random.uniform(0, PAUSE_S))
        nexts: dict[int, int] = {}
        for m in batch:
            nexts[m.partition()] = m.offset() + 1
        offsets = [TopicPartition(source, p, o) for p, o in sorted(nexts.items())]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        say(f"committed {len(batch)}")
    raise TimeoutError(f"the loop did not finish within {DEADLINE_S} s")


if __name__ == "__main__":
    bootstrap, tid, source, sink, partitions, seed = sys.argv[1:7]
    random.seed(int(seed))
    try:
        run(bootstrap, tid, source, sink, int(partitions))
    except (KafkaException, TimeoutError) as e:
        sys.stderr.write(f"txn loop {tid}: {e}\n")
        sys.exit(3)
