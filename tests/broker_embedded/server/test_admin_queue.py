"""The admin queue (admin_queue.py) with a real Broker behind a real BrokerServer and
confluent-kafka's AdminClient: a creation runs off the request handler threads, a request whose
``timeout_ms`` passes while it waits is answered REQUEST_TIMED_OUT and never run, a Metadata
request for a topic whose logs are being made answers its partitions still waiting
LEADER_NOT_AVAILABLE, a request beyond the queue's bound is answered REQUEST_TIMED_OUT at once.
A shutdown mid-creation: test_create_topics_background.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.create_topics.v4.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v4.response import CreateTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v4.response import MetadataResponse
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from broker_embedded.broker import Broker
from broker_embedded.server.admin_queue import MAX_QUEUED_REQUESTS
from broker_embedded.server.handlers import broker_server
from tests.broker_embedded.server._net import API_VERSIONS_V3, RawClient, config, request_frame
from tests.broker_embedded.server._serve import decode_response

BIG = 3_000  # partitions: seconds of creation on a loaded machine
WAIT_S = 60.0
SHUTDOWN_S = 10.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def error_of(future) -> int | None:
    try:
        future.result(WAIT_S)
    except confluent_kafka.KafkaException as e:
        return e.args[0].code()
    return None


def test_a_request_that_waits_past_its_timeout_is_request_timed_out(tmp_path: Path) -> None:
    """The admin thread is held (the test holds the controller's lock, which the first
    creation's registration waits for) while a second request's 0.2 s pass in the queue. The
    partitions' logs are made only once the test opens ``made`` (the broker's background step
    waits for it), so the Metadata request always meets them still waiting."""
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        made = threading.Event()
        step = broker.create_step

        def held_step() -> float | None:
            assert made.wait(WAIT_S), "the test never let the logs be made"
            return step()

        broker.create_step = held_step  # before the server looks it up
        made.set()  # for the step the server's start runs
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        queue = server.apis.admin_queue
        try:
            wait_until(queue.idle, "the server's first background step did not end")
            made.clear()
            endpoint = server.endpoints[0]
            bootstrap = f"{endpoint.host}:{endpoint.port}"
            first, second = admin(bootstrap), admin(bootstrap)
            with broker.controller._lock:
                big = first.create_topics([NewTopic("big", BIG, 1)], request_timeout=WAIT_S)
                wait_until(lambda: queue.running(), "the first creation did not start")
                late = second.create_topics(
                    [NewTopic("late", 1, 1)], operation_timeout=0.2, request_timeout=WAIT_S
                )["late"]
                wait_until(lambda: queue.queued() == 1, "the second did not reach the queue")
                queued = time.monotonic()
                with RawClient(endpoint.port, timeout=5) as probe:  # the handlers are free
                    probe.call(API_VERSIONS_V3)
                time.sleep(max(0.0, queued + 0.3 - time.monotonic()))  # past its deadline
            # a Metadata request auto-creating a topic registered, its logs being made: the
            # topic, its partitions (none made yet) LEADER_NOT_AVAILABLE; the connection stays
            with RawClient(endpoint.port, timeout=5) as client:
                asked = MetadataRequest(
                    topics=(MetadataRequestTopic(name=TopicName("big")),),
                    allow_auto_topic_creation=True,
                )
                frame = client.call(asked, 1)
                (topic,) = decode_response(MetadataResponse, frame, False).topics
                assert topic.error_code == ErrorCode.none
                assert {p.error_code for p in topic.partitions} == {ErrorCode.leader_not_available}
            made.set()
            assert error_of(late) == confluent_kafka.KafkaError.REQUEST_TIMED_OUT
            assert error_of(big["big"]) is None
            assert broker.list_topics() == ["big"]
            assert len(broker.describe_topic("big").partitions) == BIG
            grown = first.create_partitions([NewPartitions("big", BIG + 5)])["big"]
            assert error_of(grown) is None
            assert len(broker.describe_topic("big").partitions) == BIG + 5
        finally:
            made.set()
            server.shutdown(SHUTDOWN_S)


def wait_until(condition, failure: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.02)


def create_topics_v4(name: str, partitions: int, timeout_ms: int = 60_000) -> object:
    return CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
        validate_only=False,
    )


def test_a_full_admin_queue_answers_request_timed_out_at_once(tmp_path: Path) -> None:
    """One creation runs (held: the test holds the controller's lock its registration waits
    for), MAX_QUEUED_REQUESTS wait (one a connection), the next is answered REQUEST_TIMED_OUT
    at once with the queue's message; the waiting ones then all run."""
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        port = server.endpoints[0].port
        queue = server.apis.admin_queue
        clients = []
        held = False
        try:
            # the admin thread's first background step (due at the server's start) needs the
            # lock too: held before that step ran, the thread waited in it and never took the
            # request (seen at load 12)
            wait_until(queue.idle, "the admin thread's first background step did not end")
            broker.controller._lock.acquire()  # the admin thread waits for it below
            held = True
            running = RawClient(port, timeout=WAIT_S)
            clients.append(running)
            running.send(request_frame(create_topics_v4("big", BIG), 0))
            wait_until(lambda: queue.running(), "the first creation did not start")
            for i in range(MAX_QUEUED_REQUESTS):
                clients.append(RawClient(port, timeout=WAIT_S))
                clients[-1].send(request_frame(create_topics_v4(f"q{i}", 1), i + 1))
            wait_until(
                lambda: queue.queued() == MAX_QUEUED_REQUESTS,
                "the requests did not reach the queue",
            )
            with RawClient(port, timeout=5) as refused:
                started = time.monotonic()
                frame = refused.call(create_topics_v4("one-too-many", 1), 999)
                assert time.monotonic() - started < 1.0
            (result,) = decode_response(CreateTopicsResponse, frame, False).topics
            assert (result.name, result.error_code) == ("one-too-many", ErrorCode.request_timed_out)
            assert result.error_message == (
                f"the controller's queue is full ({MAX_QUEUED_REQUESTS} requests wait); retry"
            )
            broker.controller._lock.release()
            held = False
            for i, client in enumerate(clients):
                (done,) = decode_response(CreateTopicsResponse, client.recv_frame(), False).topics
                assert done.error_code == ErrorCode.none, (i, done)
            assert len(broker.list_topics()) == 1 + MAX_QUEUED_REQUESTS
        finally:
            if held:
                broker.controller._lock.release()
            for client in clients:
                client.close()
            server.shutdown(SHUTDOWN_S)


def test_a_timeout_of_zero_or_less_is_request_timed_out_and_creates_nothing(tmp_path: Path):
    """Kafka 3.9 answers CreateTopics with ``timeout_ms`` 0 or -1 REQUEST_TIMED_OUT and creates
    nothing (its controller's deadline has passed when the event's turn comes); 1 ms on an
    idle controller is enough for one partition there, and at least 1 s is here."""
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        try:
            with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
                codes = {}
                for name, timeout_ms in (("zero", 0), ("negative", -1), ("second", 1000)):
                    frame = client.call(create_topics_v4(name, 1, timeout_ms))
                    (result,) = decode_response(CreateTopicsResponse, frame, False).topics
                    codes[name] = result.error_code
            assert codes == {
                "zero": ErrorCode.request_timed_out,
                "negative": ErrorCode.request_timed_out,
                "second": ErrorCode.none,
            }
            assert broker.list_topics() == ["second"]
        finally:
            server.shutdown(SHUTDOWN_S)
