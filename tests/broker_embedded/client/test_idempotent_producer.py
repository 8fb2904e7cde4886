"""The wire client's idempotent producer against a real in-process BrokerServer (127.0.0.1,
port 0): a producer id from InitProducerId, sequences from 0 per partition, a batch sent again
with the same bytes (a retry after a broken connection) answered with the first append's offset
and not appended twice, and a batch encoded with the wrong sequence refused before sending."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_embedded.client.idempotent_producer import (
    ACKS_ALL,
    IdempotentProducer,
    ProducerStateError,
)
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.record.columnar_encoder import encode_batches
from tests.broker_embedded.server._serve import log_batches, log_records, served


def encode(values: list[bytes], **producer: int):
    return encode_batches(None, pa.array(values, pa.binary()), np.full(len(values), 1000),
                          max_batch_bytes=16, **producer)  # fmt: skip


def test_a_retried_batch_is_not_appended_twice(tmp_path: Path) -> None:
    with served(tmp_path / "b") as running:
        running.broker.create_topic("t", 2)
        with KafkaClient(running.bootstrap) as client:
            producer = IdempotentProducer(client)
            assert producer.fields("t", 1) == {"producer_id": producer.producer_id,
                                               "producer_epoch": 0, "base_sequence": 0}  # fmt: skip
            enc = encode([b"a" * 10, b"b" * 10, b"c" * 10], **producer.fields("t", 1))
            assert len(enc) == 3  # 16 bytes of records a batch: one record each
            ack = producer.send("t", 1, enc)
            assert (ack.base_offset, ack.last_offset, ack.records) == (0, 2, 3)
            # the last batch again, as the client's retry sends it after a broken connection
            assert client.produce("t", 1, bytes(enc[2]), acks=ACKS_ALL) == 2
            more = encode([b"d"], **producer.fields("t", 1))
            assert producer.send("t", 1, more).base_offset == 3
            with pytest.raises(ProducerStateError, match="start at sequence 0, expected 4"):
                producer.send("t", 1, enc)
        records = log_records(running.log_dir, "t", 1)
        assert [(o, v) for o, _, v, _ in records] == [
            (0, b"a" * 10), (1, b"b" * 10), (2, b"c" * 10), (3, b"d")
        ]  # fmt: skip
        batches = log_batches(running.log_dir, "t", 1)
        assert [b.base_sequence for b in batches] == [0, 1, 2, 3]
        assert {b.producer_id for b in batches} == {producer.producer_id}
        assert log_records(running.log_dir, "t", 0) == []
