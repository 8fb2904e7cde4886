"""The request path with test dispatchers registered through the real seam (KafkaApis): in-order
answers on pipelined connections while handlers and delayed completions answer out of order,
back-pressure of a full request queue, sendfile regions, handler errors, bounded shutdown."""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time

import pytest
from kio.schema.metadata.v1.request import MetadataRequest

from broker_embedded.errors import BrokerClosedError, UnknownTopicOrPartitionError
from broker_embedded.server.request_channel import FileRegion

from ._net import API_VERSIONS_V3, RawClient, config, port, request_frame, serve

METADATA_V1 = MetadataRequest(topics=None)


def echo_frame(correlation_id: int, payload: bytes) -> bytes:
    """A response body as the test dispatchers send it: correlation id + payload."""
    return struct.pack(">i", correlation_id) + payload


def register_echo(delay_of, completions=None):
    """Metadata (key 3) answered by a timer thread after ``delay_of(request)`` seconds: a
    delayed operation's completion, never a sleeping handler."""

    def register(apis):
        def handle(request):
            corr = request.header.correlation_id

            def complete():
                if completions is not None:
                    completions.append((request.client_address[1], corr))
                apis.send_frame_parts(request, [echo_frame(corr, b"echo-%d" % corr)])

            delay = delay_of(request)
            if delay:
                threading.Timer(delay, complete).start()
            else:
                complete()

        apis.register(3, 0, 12, handle)

    return register


def test_pipelined_requests_are_answered_in_order():
    """Four connections pipeline 30 requests each at once; each request is answered after a
    delay that shrinks with its correlation id (later requests would finish first), and one
    connection's delays are ten times another's."""
    completions: list[tuple[int, int]] = []

    def delay_of(request):
        slow = request.client_address[1] == slow_port
        return (0.03 if slow else 0.003) * (1 + (30 - request.header.correlation_id) % 5) / 5

    with serve(register=register_echo(delay_of, completions)) as server:
        clients = [RawClient(server) for _ in range(4)]
        slow_port = clients[0].sock.getsockname()[1]
        for client in clients:
            client.send(b"".join(request_frame(METADATA_V1, c) for c in range(1, 31)))
        for client in clients:
            for corr in range(1, 31):
                frame = client.recv_frame()
                assert frame == echo_frame(corr, b"echo-%d" % corr)
            client.close()
    fast_done = [i for i, (p, _) in enumerate(completions) if p != slow_port]
    slow_done = [i for i, (p, _) in enumerate(completions) if p == slow_port]
    assert (len(fast_done), len(slow_done)) == (90, 30)
    assert max(fast_done) < max(slow_done)  # the fast connections did not wait for the slow


def test_full_request_queue_is_back_pressure_not_drops():
    """queued.max.requests=1 and one handler held on a gate: the processors stop reading; once
    the gate opens every request is answered."""
    gate = threading.Event()
    entered = threading.Event()

    def register(apis):
        def handle(request):
            if request.header.correlation_id == 1:
                entered.set()
                gate.wait(10)  # a test-only stall of the single handler thread
            corr = request.header.correlation_id
            apis.send_frame_parts(request, [echo_frame(corr, b"")])

        apis.register(3, 0, 12, handle)

    cfg = config(queued_max_requests=1, num_io_threads=1, num_network_threads=1)
    with serve(cfg, register) as server:
        first = RawClient(server)
        first.send(request_frame(METADATA_V1, 1))
        assert entered.wait(5)
        others = [RawClient(server) for _ in range(10)]
        for i, client in enumerate(others):
            client.send(request_frame(METADATA_V1, 100 + i))
        deadline = time.monotonic() + 5
        while server.socket_server.request_channel.queued_requests() < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)
        assert server.socket_server.request_channel.queued_requests() == 1
        gate.set()
        assert first.recv_frame() == echo_frame(1, b"")
        for i, client in enumerate(others):
            assert client.recv_frame() == echo_frame(100 + i, b"")
            client.close()
        first.close()


@pytest.fixture
def data_file(tmp_path):
    """A 40 MiB file of non-repeating bytes."""
    path = tmp_path / "00000000000000000000.log"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(40):
            f.write(struct.pack(">i", i) + block[4:])
    return path


def register_file_answer(parts_of, done):
    def register(apis):
        def handle(request):
            parts = parts_of(request)
            apis.send_frame_parts(request, parts, on_done=lambda: done.append(request))

        apis.register(3, 0, 12, handle)

    return register


def test_sendfile_regions_slow_reader(data_file):
    """Header bytes, a 30 MiB region by path, bytes, a region by fd, bytes: the frame equals the
    parts exactly; the client reads slowly through a small receive buffer, so the server meets
    partial writes and full socket buffers."""
    content = data_file.read_bytes()
    fd = os.open(data_file, os.O_RDONLY)
    done: list = []

    def parts_of(request):
        return [
            echo_frame(request.header.correlation_id, b"partition-header"),
            FileRegion(12_345, 30 << 20, path=str(data_file)),
            b"between",
            FileRegion(7, 1000, fd=fd),
            FileRegion(0, 0, path=str(data_file)),
            b"end",
        ]

    try:
        with serve(register=register_file_answer(parts_of, done)) as server:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            client.settimeout(10)
            client.connect(("127.0.0.1", port(server)))
            raw = RawClient.__new__(RawClient)
            raw.sock = client
            raw.send(request_frame(METADATA_V1, 9))
            (size,) = struct.unpack(">i", raw.recv_exact(4))
            head = b""
            for _ in range(20):  # dawdle over the first bytes
                head += raw.recv_exact(4096)
                time.sleep(0.01)
            frame = head + raw.recv_exact(size - len(head))
            # the connection is usable afterwards
            raw.send(request_frame(METADATA_V1, 10))
            second = raw.recv_frame()
            raw.close()
    finally:
        os.close(fd)
    expected = (
        echo_frame(9, b"partition-header")
        + content[12_345 : 12_345 + (30 << 20)]
        + b"between"
        + content[7:1007]
        + b"end"
    )
    assert size == len(expected)
    assert frame == expected
    assert second[:4] == struct.pack(">i", 10)
    assert len(done) == 2


def test_region_past_the_end_of_its_file_closes_the_connection(data_file, caplog):
    done: list = []
    size = data_file.stat().st_size

    def parts_of(request):
        return [
            echo_frame(request.header.correlation_id, b""),
            FileRegion(size - 10, 20, path=str(data_file)),
        ]

    with serve(register=register_file_answer(parts_of, done)) as server:
        with RawClient(server) as client:
            client.send(request_frame(METADATA_V1, 1))
            (frame_size,) = struct.unpack(">i", client.recv_exact(4))
            assert frame_size == 24
            assert client.recv_exact(14)[:4] == struct.pack(">i", 1)
            assert client.closed_by_server()
        with RawClient(server) as other:
            assert other.call(API_VERSIONS_V3)
    assert len(done) == 1
    lines = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(lines) == 1 and f"ends before byte {size + 10}" in lines[0]


def test_handler_error_closes_that_connection_only(caplog):
    def register(apis):
        def handle(request):
            raise UnknownTopicOrPartitionError("topic nope partition 0 is not on this broker")

        apis.register(3, 0, 12, handle)

    with serve(register=register) as server, caplog.at_level(logging.WARNING):
        with RawClient(server) as bad, RawClient(server) as good:
            bad.send(request_frame(METADATA_V1, 1))
            assert bad.closed_by_server()
            assert good.call(API_VERSIONS_V3, 2)[:4] == struct.pack(">i", 2)
            client = f"127.0.0.1:{bad.sock.getsockname()[1]}"
    lines = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(lines) == 1
    assert client in lines[0] and "Metadata v1 request failed" in lines[0] and "nope" in lines[0]


def test_a_stopped_broker_closes_the_connection_in_one_line_without_a_traceback(caplog):
    """A broker stopped (``kafkalog serve --brokers N``: ``stop ID``) while its server drains."""

    def register(apis):
        def handle(request):
            raise BrokerClosedError("broker 1 is closed")

        apis.register(3, 0, 12, handle)

    with serve(register=register) as server, caplog.at_level(logging.WARNING):
        with RawClient(server) as bad:
            bad.send(request_frame(METADATA_V1, 1))
            assert bad.closed_by_server()
            client = f"127.0.0.1:{bad.sock.getsockname()[1]}"
    (record,) = [r for r in caplog.records if client in r.getMessage()]
    assert record.exc_info is None
    assert record.getMessage().endswith("Metadata v1: the broker is stopped (broker 1 is closed)")


def test_shutdown_is_bounded_with_unanswered_requests():
    """A dispatcher that never answers: shutdown still returns within its bound, every client
    sees its connection closed, and the listener is gone."""
    parked = []

    def register(apis):
        apis.register(3, 0, 12, parked.append)

    with serve(register=register) as server:
        clients = [RawClient(server) for _ in range(5)]
        for i, client in enumerate(clients):
            client.send(request_frame(METADATA_V1, i))
        deadline = time.monotonic() + 5
        while len(parked) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        address = ("127.0.0.1", port(server))
        started = time.monotonic()
        server.shutdown(2.0)
        elapsed = time.monotonic() - started
        assert elapsed < 3.0
        for client in clients:
            assert client.closed_by_server()
            client.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=2)
    # a late answer from a delayed operation after shutdown is dropped quietly
    server.apis.send_frame_parts(parked[0], [b"late"])


def test_listeners_parse_and_report_their_bound_ports():
    from broker_embedded.server.broker_server import BrokerServer
    from broker_embedded.server.endpoint import Endpoint

    assert Endpoint.parse("PLAINTEXT://127.0.0.1:9092") == Endpoint("127.0.0.1", 9092)
    assert Endpoint.parse("PLAINTEXT://[::1]:0") == Endpoint("::1", 0)
    for bad in ("127.0.0.1:9092", "SSL://h:1", "PLAINTEXT://h:x", "PLAINTEXT://h"):
        with pytest.raises(ValueError, match="is not PLAINTEXT://host:port"):
            Endpoint.parse(bad)
    server = BrokerServer(config(), ["PLAINTEXT://127.0.0.1:0", Endpoint("127.0.0.1", 0)])
    with server:
        ports = [e.port for e in server.endpoints]
        assert len(set(ports)) == 2 and all(p > 0 for p in ports)
        for p in ports:
            with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
                s.sendall(request_frame(API_VERSIONS_V3, 4))
                assert s.recv(8)[4:8] == struct.pack(">i", 4)


def test_shutdown_finishes_in_flight_requests():
    """A request answered 0.3 s later by a delayed completion still gets its answer when
    shutdown starts meanwhile; then the connection closes."""
    with serve(register=register_echo(lambda request: 0.3)) as server:
        with RawClient(server) as client:
            client.send(request_frame(METADATA_V1, 8))
            time.sleep(0.05)
            started = time.monotonic()
            server.shutdown(5.0)
            assert time.monotonic() - started < 2.0
            assert client.recv_frame() == echo_frame(8, b"echo-8")
            assert client.closed_by_server()
