"""``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes``: each accepted connection's
SO_SNDBUF and SO_RCVBUF (Linux reports twice the size set, its bookkeeping included), the
receive one inherited from the listen socket; -1 leaves the OS's sizes. The broker config
refuses 0 and other negatives, naming the key."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from broker_embedded.broker_config import BrokerConfig, InvalidConfigError
from tests.broker_embedded.server._serve import served

WAIT_S = 30.0


def accepted_buffers(log_dir: Path, **config: int) -> tuple[int, int]:
    """(SO_SNDBUF, SO_RCVBUF) of the server's end of one connection."""
    with served(log_dir, **config) as running:
        host, port = running.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port))):
            processors = running.server.socket_server.processors
            deadline = time.monotonic() + WAIT_S
            while not (channels := [c for p in processors for c in list(p._connections.values())]):
                assert time.monotonic() < deadline, "the connection was never taken"
                time.sleep(0.01)
            sock = channels[0].sock
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            )


def test_kafka_s_100_kib_by_default(tmp_path: Path) -> None:
    assert accepted_buffers(tmp_path) == (2 * 102_400, 2 * 102_400)


def test_sizes_set(tmp_path: Path) -> None:
    sizes = {"socket_send_buffer_bytes": 65_536, "socket_receive_buffer_bytes": 262_144}
    assert accepted_buffers(tmp_path, **sizes) == (2 * 65_536, 2 * 262_144)


def test_minus_one_leaves_the_os_sizes(tmp_path: Path) -> None:
    """Neither size is set (Linux then sizes and autotunes them itself)."""
    sizes = {"socket_send_buffer_bytes": -1, "socket_receive_buffer_bytes": -1}
    send, receive = accepted_buffers(tmp_path, **sizes)
    assert send != 2 * 102_400 and receive != 2 * 102_400


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_other_values_are_refused_naming_the_key(value) -> None:
    with pytest.raises(InvalidConfigError) as e:
        BrokerConfig.from_mapping({"broker": {"socket.send.buffer.bytes": value}}, "b.toml")
    assert str(e.value) == (
        f"b.toml: invalid value {value!r} for broker config socket.send.buffer.bytes: must be "
        "-1 (the OS's default) or an integer >= 1"
    )
