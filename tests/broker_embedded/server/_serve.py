"""Helpers of the API handler tests: a real Broker on a tmp log dir behind a real BrokerServer
on 127.0.0.1 (port 0), and the client settings that keep the real clients bounded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from tests.broker_embedded.server._net import config


@dataclass
class Served:
    broker: Broker
    server: BrokerServer
    log_dir: Path

    @property
    def bootstrap(self) -> str:
        endpoint = self.server.endpoints[0]
        return f"{endpoint.host}:{endpoint.port}"


@contextlib.contextmanager
def served(log_dir: Path, **broker_config: int) -> Iterator[Served]:
    """A started server over a new broker; both shut down (bounded) on exit."""
    broker = Broker(log_dir, create=True, config=config(**broker_config))
    try:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
        server.start()
        try:
            yield Served(broker, server, Path(log_dir))
        finally:
            server.shutdown(5.0)
    finally:
        broker.close()


def log_records(log_dir: Path, topic: str, partition: int) -> list:
    """Every record of a partition's ``.log`` files on disk, read by kafka-python (an
    independent decoder), as (offset, key, value, headers) tuples in offset order."""
    from tests.broker_embedded.record._peers import kafka_python_read

    directory = Path(log_dir) / f"{topic}-{partition}"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    return [
        (r.offset, r.key, r.value, tuple(r.headers))
        for b in kafka_python_read(data)
        if not b.is_control
        for r in b.records
    ]


def log_batches(log_dir: Path, topic: str, partition: int) -> list:
    """The batches of a partition on disk as kafka-python reads them."""
    from tests.broker_embedded.record._peers import kafka_python_read

    directory = Path(log_dir) / f"{topic}-{partition}"
    return kafka_python_read(b"".join(p.read_bytes() for p in sorted(directory.glob("*.log"))))


def decode_response(message_class: type, frame: bytes, flexible_header: bool) -> object:
    """A response frame's body (after the correlation id and, for flexible versions, the
    header's empty tagged fields) decoded by kio."""
    from kio.serial import entity_reader

    offset = 5 if flexible_header else 4
    body, _ = entity_reader(message_class)(memoryview(frame), offset)
    return body
