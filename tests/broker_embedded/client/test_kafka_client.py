"""The wire client's limits against real sockets and a real ``kafkalog serve --brokers 3``: a
broker that never answers, one that announces a huge response, and a leader that stops while
the client holds its old metadata, and one that does not know a partition the metadata named
(both retried through a metadata refresh)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_embedded.client.broker_connection import BrokerConnectionError, ClientConfig
from broker_embedded.client.kafka_client import EARLIEST, LATEST, KafkaClient
from broker_embedded.common.producer_record import build_batch
from broker_embedded.errors import UnknownTopicOrPartitionError
from tests.broker_embedded.server._serve import served
from tests.spark_kafkalog._serve_proc import ServeProcess

FAST = ClientConfig(connect_timeout_s=2.0, request_timeout_s=0.5, retries=2)


@contextlib.contextmanager
def fake_broker(reply: bytes | None) -> Iterator[str]:
    """A listener on 127.0.0.1 that accepts one connection, reads, and answers ``reply`` to the
    first request (None: never answers); closed on exit."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        listener.settimeout(5)
        with contextlib.suppress(OSError), listener.accept()[0] as conn:
            conn.settimeout(5)
            conn.recv(65536)
            if reply is not None:
                conn.sendall(reply)
            done.wait(5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(10)
        listener.close()


def test_a_broker_that_never_answers_times_out_naming_it() -> None:
    with fake_broker(None) as address, KafkaClient(address, FAST) as client:
        started = time.monotonic()
        with pytest.raises(BrokerConnectionError) as e:
            client.metadata()
        assert time.monotonic() - started < 3
    assert str(e.value) == f"ApiVersions v3 to broker {address}: no response within 0.5 s"


def test_a_response_larger_than_the_limit_is_refused_unread() -> None:
    with fake_broker(struct.pack(">ii", 1 << 30, 1)) as address, KafkaClient(address, FAST) as c:
        with pytest.raises(BrokerConnectionError) as e:
            c.metadata()
    assert str(e.value) == (
        f"ApiVersions v3 to broker {address}: response of 1073741824 bytes "
        f"(at most {64 << 20} accepted)"
    )


def test_offsets_fetch_and_errors_name_topic_and_partition(tmp_path: Path) -> None:
    with served(tmp_path) as s, KafkaClient(s.bootstrap, FAST) as client:
        s.broker.create_topic("t", 2)
        base = client.produce("t", 1, build_batch([b"a", b"b", b"c"], now_ms=5), acks=-1)
        assert base == 0
        assert client.list_offset("t", 1, EARLIEST) == 0
        assert client.list_offset("t", 1, LATEST) == 3
        fetched = client.fetch("t", 1, 1, 1 << 20, 0)
        assert (fetched.high_watermark, fetched.log_start_offset) == (3, 0)
        assert len(fetched.records) > 0
        with pytest.raises(UnknownTopicOrPartitionError) as e:
            client.list_offset("t", 7, LATEST)
    assert str(e.value) == "topic 't' has no partition 7 (partitions 0..1)"


def test_a_stopped_leader_is_retried_through_a_metadata_refresh(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "c", brokers=3, stderr=tmp_path / "err") as server:
        with KafkaClient(server.bootstrap, ClientConfig(retries=5)) as client:
            client.create_topic("r", 1, 3, {})
            for _ in range(50):  # the ISR fills as the followers catch up
                if len(client.metadata(["r"])[0].partitions[0].isr) == 3:
                    break
                time.sleep(0.1)
            leader = client.topic("r").partitions[0].leader
            assert client.produce("r", 0, build_batch([b"x"], now_ms=1), acks=-1) == 0
            assert server.control(f"stop {leader}") == f"broker {leader} stopped"
            # the cached metadata still names the stopped leader: refreshed, then retried
            assert client.produce("r", 0, build_batch([b"y"], now_ms=2), acks=-1) == 1
            assert client.topic("r").partitions[0].leader != leader
            assert client.list_offset("r", 0, LATEST) == 2
        assert server.terminate() == 0


def test_a_leader_that_does_not_know_a_named_partition_sends_the_client_to_the_metadata(
    tmp_path: Path,
) -> None:
    """A leader answering UNKNOWN_TOPIC_OR_PARTITION for a partition the cached metadata names
    (a topic just created, or just deleted) is retried after a metadata refresh, as Kafka's
    clients do; the refreshed metadata decides: here the topic is gone, so the error is the
    metadata's, at once."""
    with served(tmp_path) as s, KafkaClient(s.bootstrap, ClientConfig(retries=5)) as client:
        s.broker.create_topic("gone", 1)
        assert client.produce("gone", 0, build_batch([b"a"], now_ms=5), acks=-1) == 0
        s.broker.delete_topic("gone")
        with pytest.raises(UnknownTopicOrPartitionError) as e:
            client.produce("gone", 0, build_batch([b"b"], now_ms=6), acks=-1)
    assert str(e.value) == "Metadata of topic 'gone' failed: UNKNOWN_TOPIC_OR_PARTITION"
