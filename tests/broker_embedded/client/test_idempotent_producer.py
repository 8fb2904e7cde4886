"""The wire client's idempotent producer against a real in-process BrokerServer (127.0.0.1,
port 0): a producer id from InitProducerId, sequences from 0 per partition, a batch sent again
with the same bytes answered with the first append's offset and not appended twice, and a batch
encoded with the wrong sequence refused before sending. Then a real broken connection: the broker
is reached through a TCP proxy (the broker's metadata advertises the proxy's port) that closes
the client's connection after the broker appended a Produce and before its response reaches the
client; the client's retry sends the same batch, and it is in the log once."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_embedded.broker import Broker
from broker_embedded.client.broker_connection import PRODUCE, ClientConfig
from broker_embedded.client.idempotent_producer import (
    ACKS_ALL,
    IdempotentProducer,
    ProducerStateError,
)
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.record.columnar_encoder import encode_batches
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import ApiContext, Node, register_all
from tests.broker_embedded.server._net import config
from tests.broker_embedded.server._serve import log_batches, log_records, served


def encode(values: list[bytes], **producer: int):
    return encode_batches(
        None,
        pa.array(values, pa.binary()),
        np.full(len(values), 1000),
        max_batch_bytes=16,
        **producer,
    )


def test_a_retried_batch_is_not_appended_twice(tmp_path: Path) -> None:
    with served(tmp_path / "b") as running:
        running.broker.create_topic("t", 2)
        with KafkaClient(running.bootstrap) as client:
            producer = IdempotentProducer(client)
            assert producer.fields("t", 1) == {
                "producer_id": producer.producer_id,
                "producer_epoch": 0,
                "base_sequence": 0,
            }
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
            (0, b"a" * 10),
            (1, b"b" * 10),
            (2, b"c" * 10),
            (3, b"d"),
        ]
        batches = log_batches(running.log_dir, "t", 1)
        assert [b.base_sequence for b in batches] == [0, 1, 2, 3]
        assert {b.producer_id for b in batches} == {producer.producer_id}
        assert log_records(running.log_dir, "t", 0) == []


class DroppingProxy:
    """A TCP proxy on 127.0.0.1 (port 0) to ``target`` for a client with one request in flight:
    it relays each request frame and its response, except that after the first
    ``drop_produce_responses`` Produce requests it closes the client's connection instead of
    relaying the response (the broker has handled the request). Daemon threads; every socket
    has a timeout; :meth:`close` stops accepting."""

    def __init__(self, target: tuple[str, int], drop_produce_responses: int) -> None:
        self.target = target
        self.drops_left = drop_produce_responses
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.target, timeout=10) as broker:
            client.settimeout(10)
            while not self._closed.is_set():
                request = _frame(client)
                if request is None:
                    return
                broker.sendall(request)
                response = _frame(broker)
                if response is None:
                    return
                (api_key,) = struct.unpack_from(">h", request, 4)
                if api_key == PRODUCE and self.drops_left > 0:
                    self.drops_left -= 1
                    self.dropped += 1
                    return  # the client's connection closes without the response
                client.sendall(response)


def _frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame, or None at the end of the stream."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    body = _exactly(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def test_a_produce_whose_response_is_lost_is_retried_and_appended_once(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "b", create=True, config=config())
    proxy: DroppingProxy | None = None
    try:
        broker.create_topic("t", 1)
        holder: list[DroppingProxy] = []

        def nodes() -> tuple[Node, ...]:  # the broker as its metadata advertises it: the proxy
            return (Node(broker.broker_id, "127.0.0.1", holder[0].port, broker.rack),)

        ctx = ApiContext.of(broker, nodes)
        server = BrokerServer(
            broker.config, ["PLAINTEXT://127.0.0.1:0"], lambda apis: register_all(apis, ctx)
        ).start()
        try:
            endpoint = server.endpoints[0]
            proxy = DroppingProxy((endpoint.host, endpoint.port), drop_produce_responses=2)
            holder.append(proxy)
            cfg = ClientConfig(request_timeout_s=10, retries=5, retry_backoff_s=0.05)
            with KafkaClient(f"127.0.0.1:{proxy.port}", cfg) as client:
                producer = IdempotentProducer(client)
                first = producer.send(
                    "t", 0, encode([b"x" * 10, b"y" * 10], **producer.fields("t", 0))
                )
                second = producer.send("t", 0, encode([b"z"], **producer.fields("t", 0)))
            assert proxy.dropped == 2  # the first two Produce responses never reached the client
            assert (first.base_offset, first.last_offset) == (0, 1)
            assert (second.base_offset, second.last_offset) == (2, 2)
        finally:
            server.shutdown(5.0)
    finally:
        if proxy is not None:
            proxy.close()
        broker.close()
    records = log_records(tmp_path / "b", "t", 0)
    assert [(o, v) for o, _, v, _ in records] == [(0, b"x" * 10), (1, b"y" * 10), (2, b"z")]
