"""Zero-copy Fetch responses: the records go from the segment file to the socket with sendfile,
from a descriptor held until the response is written, so a response being sent stays exactly the
bytes read even when, meanwhile, the active segment grows, the cleaner swaps the segment, or
retention deletes it. The client's receive buffer is kept small and it reads only after the
change, so the change happens while the server is still sending."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cleaner.cleaner import Cleaner
from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.server.handlers.region_pins import Held, RegionPins
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import log_bytes
from tests.broker_embedded.server._fetch import (
    decode,
    expected,
    fetch_request,
    fetch_server,
    partition_data,
)
from tests.broker_embedded.server._net import RawClient, request_frame

TP = TopicPartition("t", 0)
BIG = 900_000  # one record per batch, below max.message.bytes
MB = 1 << 20
SEGMENT = 10 * MB  # a segment larger than the socket buffers, so sending it takes a while


@pytest.fixture
def broker(log_dir):
    """A broker without cleaner threads: the tests run the cleaner themselves, at the moment a
    response is being sent (a background round could clean before the fetch reads)."""
    b = Broker(log_dir, create=True, config=BrokerConfig(log_cleaner_threads=0))
    yield b
    b.close()


def produce_big(broker: Broker, count: int, keys: int | None = None) -> None:
    for i in range(count):
        key = None if keys is None else f"k{i % keys}".encode()
        broker.produce("t", 0, [ProducerRecord(os.urandom(BIG), key)])


def segment_files(broker: Broker) -> list[Path]:
    return sorted((Path(broker.log_dir) / "t-0").glob("*.log"))


def slow_client(server) -> RawClient:
    """A client whose small receive buffer keeps a big response in the server's hands."""
    c = RawClient(server)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    return c


def wait_pinned(api, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while api.pins.open == 0:
        assert time.monotonic() < deadline, "the response was never pinned"
        time.sleep(0.005)


def wait_released(api, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while api.pins.open:
        assert time.monotonic() < deadline, "pins were not released"
        time.sleep(0.005)


def send_fetch(c: RawClient, offset: int, max_bytes: int = 50 << 20) -> None:
    request = fetch_request(12, [("t", [(0, offset, max_bytes, -1)])], max_bytes=max_bytes)
    c.send(request_frame(request, 1))


def records_of(frame: bytes) -> bytes:
    return decode(12, frame).responses[0].partitions[0].records


def test_active_segment_growing_while_sent(broker):
    broker.create_topic("t", 1)
    produce_big(broker, 6)
    before = log_bytes(broker, "t", 0)
    with fetch_server(broker) as (server, api), slow_client(server) as c:
        send_fetch(c, 0)
        wait_pinned(api)
        produce_big(broker, 3)  # the active segment grows past the region read
        got = decode(12, c.recv_frame())
        want = partition_data(12, 0, hw=6, lso=6, log_start=0, records=before)
        assert got == expected(12, [("t", [want])])
        wait_released(api)
        # the next fetch reads on from there
        send_fetch(c, 6)
        assert records_of(c.recv_frame()) == log_bytes(broker, "t", 0)[len(before) :]


def test_cleaner_swapping_the_segment_being_sent(broker):
    broker.create_topic("t", 1, config={"cleanup.policy": "compact", "segment.bytes": SEGMENT})
    produce_big(broker, 22, keys=2)
    first = segment_files(broker)[0]
    old_bytes, old_ino = first.read_bytes(), first.stat().st_ino
    with fetch_server(broker) as (server, api), slow_client(server) as c:
        send_fetch(c, 0, max_bytes=len(old_bytes))
        wait_pinned(api)
        lg = broker.log_manager.get_log(TP)
        Cleaner(SkimpyOffsetMap(1 << 16)).clean(lg, None)
        assert first.stat().st_ino != old_ino  # swapped under the response
        assert records_of(c.recv_frame()) == old_bytes  # the file that was read
        wait_released(api)
        # a fetch now reads the cleaned segment
        send_fetch(c, 0)
        cleaned = records_of(c.recv_frame())
        assert (
            cleaned == first.read_bytes()[: len(cleaned)] and cleaned != old_bytes[: len(cleaned)]
        )


def test_cleaner_swapping_a_segment_sent_from_its_path_closes_that_connection(broker, caplog):
    """No pin and no copy budget: the region goes by path, opened by the network thread per
    write. The cleaner swaps the file before the response is out: the connection is closed
    (its frame size is already out), naming the file; a new fetch reads the cleaned segment."""
    broker.create_topic("t", 1, config={"cleanup.policy": "compact", "segment.bytes": SEGMENT})
    produce_big(broker, 22, keys=2)
    first = segment_files(broker)[0]
    size = first.stat().st_size
    with fetch_server(broker, max_pinned=0, copy_budget=1) as (server, api):
        with slow_client(server) as c:
            send_fetch(c, 0, max_bytes=size)
            deadline = time.monotonic() + 10
            while api.pins.from_files == 0:
                assert time.monotonic() < deadline, "the region was not sent from its path"
                time.sleep(0.005)
            Cleaner(SkimpyOffsetMap(1 << 16)).clean(broker.log_manager.get_log(TP), None)
            with pytest.raises(ConnectionError):
                c.recv_frame()
        assert any(
            f"{first} was replaced while it was being sent" in r.getMessage()
            for r in caplog.records
        )
        with RawClient(server) as again:
            send_fetch(again, 0)
            cleaned = records_of(again.recv_frame())
            assert cleaned == first.read_bytes()[: len(cleaned)]


def test_retention_deleting_the_segment_being_sent(broker):
    broker.create_topic("t", 1, config={"segment.bytes": SEGMENT})
    produce_big(broker, 22)
    first = segment_files(broker)[0]
    old_bytes = first.read_bytes()
    with fetch_server(broker) as (server, api), slow_client(server) as c:
        send_fetch(c, 0, max_bytes=len(old_bytes))
        wait_pinned(api)
        second_base = int(segment_files(broker)[1].stem)
        broker.delete_records("t", 0, second_base)
        broker.log_manager.get_log(TP).delete_old_segments()  # if delete_records did not
        assert not first.exists()  # unlinked while being sent
        assert records_of(c.recv_frame()) == old_bytes
        wait_released(api)
        send_fetch(c, 0)
        got = decode(12, c.recv_frame())
        assert got.responses[0].partitions[0].error_code == 1  # below the new log start


def test_a_region_read_before_a_swap_is_not_sent_from_the_new_file(broker):
    """The read names the file (device, inode); pinned after the cleaner swapped it, the pin
    refuses it and the partition goes out without records (the client fetches again)."""
    broker.create_topic("t", 1, config={"cleanup.policy": "compact", "segment.bytes": SEGMENT})
    produce_big(broker, 22, keys=2)
    answers = []
    request = FetchRequest((PartitionFetch(TP, 0),), max_wait_ms=0)
    broker.replica_manager.fetch_messages_async(request, answers.append, zero_copy=True)
    region = answers[0].partitions[0].region
    assert region is not None and answers[0].partitions[0].records == b""
    pins = RegionPins(4)
    held = Held()
    Cleaner(SkimpyOffsetMap(1 << 16)).clean(broker.log_manager.get_log(TP), None)
    assert pins.pin(region, held) is None and held == Held() and pins.misses == 1


def test_beyond_the_pin_limit_regions_are_copied(broker):
    broker.create_topic("t", 1)
    produce_big(broker, 2)
    with fetch_server(broker, max_pinned=0) as (server, api), RawClient(server) as c:
        send_fetch(c, 0)
        assert records_of(c.recv_frame()) == log_bytes(broker, "t", 0)
        assert api.pins.copies == 1 and api.pins.open == 0


def test_beyond_the_pins_and_the_copy_budget_regions_are_sent_from_their_files(broker):
    """No pin and a copy budget smaller than the records: the region goes by path (opened by
    the network thread), the same bytes; the budget is whole again after each response."""
    broker.create_topic("t", 1)
    produce_big(broker, 2)
    size = len(log_bytes(broker, "t", 0))
    with fetch_server(broker, max_pinned=0, copy_budget=size - 1) as (server, api):
        with RawClient(server) as c:
            for _ in range(2):
                send_fetch(c, 0)
                assert records_of(c.recv_frame()) == log_bytes(broker, "t", 0)
        assert (api.pins.copies, api.pins.from_files, api.pins.open) == (0, 2, 0)
        assert api.pins.budget.available == size - 1


def test_fetch_max_pinned_regions_0_makes_every_response_read_and_send(tmp_path):
    """The broker config key (benchmarks/serve.py flips it): no descriptor is pinned, the bytes
    are the same."""
    broker = Broker(tmp_path / "logs", create=True, config=BrokerConfig(fetch_max_pinned_regions=0))
    try:
        broker.create_topic("t", 1)
        produce_big(broker, 2)
        with fetch_server(broker) as (server, api), RawClient(server) as c:
            for _ in range(2):
                send_fetch(c, 0)
                assert records_of(c.recv_frame()) == log_bytes(broker, "t", 0)
            assert api.pins.max_open == 0 and api.pins.copies == 2 and api.pins.open == 0
    finally:
        broker.close()


def test_the_handler_takes_its_pin_limit_from_the_broker_config(broker):
    with fetch_server(broker) as (server, api):
        assert api.pins.max_open == 1024 == broker.config.fetch_max_pinned_regions
