"""The wire client's transactions (broker_embedded/client/wire_transactions.py) against a real
in-process BrokerServer (127.0.0.1, port 0), read back by confluent-kafka and kafka-python: a
transaction produced by one client and committed by EndTxn from another client; a second
producer of the same transactional id fencing the first and aborting its open transaction (the
first's COMMIT then fails); an offset committed in a transaction visible only once it commits
(OffsetFetch require_stable); EndTxn repeated answered without error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.client.wire_transactions import (
    NO_OFFSET,
    TransactionalWireProducer,
    committed_offset,
    end_txn,
)
from broker_embedded.errors import ProducerFencedError
from tests.broker_embedded.client.test_idempotent_producer import encode
from tests.broker_embedded.server._serve import log_batches, served

pytest.importorskip("confluent_kafka")
from tests.broker_embedded.server._consume import consume  # noqa: E402


def send(producer: TransactionalWireProducer, values: list[bytes]) -> None:
    producer.send("t", 0, encode(values, **producer.fields("t", 0)))


def committed(bootstrap: str) -> list[bytes]:
    return [v for _, _, v, _, _ in consume(bootstrap, "t", 1, "read_committed", 20.0)]


def test_a_transaction_produced_here_and_committed_from_another_client(tmp_path: Path) -> None:
    with (
        served(tmp_path / "b") as s,
        KafkaClient(s.bootstrap) as c1,
        KafkaClient(s.bootstrap) as c2,
    ):
        s.broker.create_topic("t", 1)
        producer = TransactionalWireProducer(c1, "tx")
        send(producer, [b"a", b"b"])
        assert committed(s.bootstrap) == []  # open: nothing below the LSO
        end_txn(c2, producer.handle, commit=True)
        end_txn(c2, producer.handle, commit=True)  # a retried EndTxn: no error, no marker
        assert committed(s.bootstrap) == [b"a", b"b"]
        batches = log_batches(s.log_dir, "t", 0)
        assert [(b.is_transactional, b.is_control) for b in batches] == [
            (True, False),
            (True, True),
        ]
        assert {b.producer_id for b in batches} == {producer.producer_id}


def test_a_new_producer_of_the_id_fences_the_old_and_aborts_its_transaction(
    tmp_path: Path,
) -> None:
    with (
        served(tmp_path / "b") as s,
        KafkaClient(s.bootstrap) as c1,
        KafkaClient(s.bootstrap) as c2,
    ):
        s.broker.create_topic("t", 1)
        old = TransactionalWireProducer(c1, "tx")
        send(old, [b"zombie"])
        new = TransactionalWireProducer(c2, "tx")  # CONCURRENT_TRANSACTIONS retried inside
        assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
        with pytest.raises(ProducerFencedError, match="EndTxn COMMIT of transactional id 'tx'"):
            end_txn(c1, old.handle, commit=True)
        send(new, [b"fresh"])
        end_txn(c2, new.handle, commit=True)
        assert committed(s.bootstrap) == [b"fresh"]
        uncommitted = consume(s.bootstrap, "t", 1, "read_uncommitted", 20.0)
        assert [v for _, _, v, _, _ in uncommitted] == [b"zombie", b"fresh"]


def test_an_offset_committed_in_a_transaction_shows_once_it_commits(tmp_path: Path) -> None:
    with served(tmp_path / "b") as s, KafkaClient(s.bootstrap) as client:
        s.broker.create_topic("t", 1)
        aborted = TransactionalWireProducer(client, "tx")
        aborted.commit_offset("g", "t", 0, 7)
        end_txn(client, aborted.handle, commit=False)
        assert committed_offset(client, "g", "t", 0) == NO_OFFSET
        kept = TransactionalWireProducer(client, "tx")
        send(kept, [b"x"])
        kept.commit_offset("g", "t", 0, 8)
        end_txn(client, kept.handle, commit=True)
        # EndTxn answers at PrepareCommit; the offset shows when the markers are written (this
        # server's OffsetFetch does not answer UNSTABLE_OFFSET_COMMIT meanwhile: poll, bounded)
        deadline = time.monotonic() + 10
        while committed_offset(client, "g", "t", 0) != 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committed_offset(client, "g", "t", 0) == 8
        assert client.committed_offsets("g") == {("t", 0): 8}
