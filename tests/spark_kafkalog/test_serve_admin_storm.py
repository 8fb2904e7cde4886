"""``kafkalog serve`` under an admin storm (several AdminClients creating topics of hundreds of
partitions at once), as a real child process with confluent-kafka clients: other clients keep
being answered (ApiVersions over a raw socket, an acks=all produce), every topic is created
whole, SIGTERM ends the process within its 10 s whatever is being created, and the next start
(after SIGTERM or SIGKILL while the answered topics' logs are still being made) listens at once
and completes every topic acknowledged (each partition led, ``kafkalog dump --verify`` clean)
and finds the others complete or absent.

Time bounds are generous (a loaded machine): probes answer within 1 s (a request handler
waiting behind partition creation answers after many seconds), exit within 10 s of SIGTERM.
The exact rates are measured by benchmarks/admin_storm.py.
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ServeProcess

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_embedded.server._net import API_VERSIONS_V3, RawClient  # noqa: E402
from tests.spark_kafkalog.test_serve import run_kafkalog  # noqa: E402

CLIENTS = 9
# Hang guards (a busy machine must pass; the latencies during a storm and the stop's time are
# measured by benchmarks/admin_storm.py): a probe unanswered within its timeout, a stop that
# outlives the server's own 10 s shutdown deadline by far.
PROBE_TIMEOUT_S = 15.0
EXIT_BOUND_S = 30.0
RESTART_BOUND_S = 60.0  # a hang guard; that the restart listens first is seen in the log dir
STORM_WAIT_S = 90.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 120_000, "log_level": 0}
    )


def storm(bootstrap: str, partitions: int, clients: list) -> dict[str, object]:
    """CLIENTS AdminClients (kept in ``clients``: a dropped client's futures fail), each
    creating one topic of ``partitions`` at once: the futures by topic."""
    futures = {}
    for i in range(CLIENTS):
        name = f"storm-{i}"
        clients.append(admin(bootstrap))
        futures[name] = clients[-1].create_topics(
            [NewTopic(name, partitions, 1)], request_timeout=120
        )[name]
    return futures


def probe(port: int) -> float:
    """One ApiVersions round trip on a new connection: seconds (PROBE_TIMEOUT_S when none)."""
    started = time.monotonic()
    try:
        with RawClient(port, timeout=PROBE_TIMEOUT_S) as client:
            client.call(API_VERSIONS_V3)
    except OSError:
        return PROBE_TIMEOUT_S
    return time.monotonic() - started


def partition_counts(bootstrap: str) -> dict[str, int]:
    listed = admin(bootstrap).list_topics(timeout=30).topics
    return {name: len(t.partitions) for name, t in listed.items()}


def test_other_clients_are_answered_while_nine_admin_clients_create_topics(tmp_path: Path):
    log_dir = tmp_path / "logs"
    partitions = 150
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        creator = admin(server.bootstrap)
        creator.create_topics([NewTopic("other", 1, 1)])["other"].result(30)
        port = server.ports[0]
        clients: list[AdminClient] = []
        futures = storm(server.bootstrap, partitions, clients)
        latencies = [probe(port) for _ in range(6)]  # six in a row, as the probe
        assert max(latencies) < PROBE_TIMEOUT_S, latencies  # every probe answered
        acked = []
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "acks": "all",
                "message.timeout.ms": 10_000,
                "log_level": 0,
            }
        )
        producer.produce(
            "other", b"during the storm", on_delivery=lambda err, msg: acked.append(err)
        )
        assert producer.flush(15) == 0 and acked == [None]
        for name, future in futures.items():
            assert future.result(STORM_WAIT_S) is None, name
        counts = partition_counts(server.bootstrap)
        assert {n: counts[n] for n in futures} == dict.fromkeys(futures, partitions)
        assert server.terminate(30) == 0


def _complete_or_absent(bootstrap: str, acknowledged: list[str], partitions: int) -> dict:
    """The storm topics the restarted server lists, each whole, and once every partition is
    led (the restarted server makes what was not made while it listens: bounded wait); the
    acknowledged ones must be there."""
    client = admin(bootstrap)
    deadline = time.monotonic() + STORM_WAIT_S
    while True:
        listed = {
            n: t for n, t in client.list_topics(timeout=30).topics.items() if n.startswith("storm-")
        }
        assert {n: len(t.partitions) for n, t in listed.items()} == dict.fromkeys(
            listed, partitions
        )
        unled = sum(
            1
            for t in listed.values()
            for m in t.partitions.values()
            if m.leader < 0 or m.error is not None
        )
        if not unled:
            break
        assert time.monotonic() < deadline, f"{unled} partitions still without a leader"
        time.sleep(0.5)
    assert set(acknowledged) <= set(listed), "an acknowledged topic is gone"
    return listed


def _acknowledged(futures: dict, deadline_s: float = 60.0) -> list[str]:
    """Until every topic of the storm is answered (bounded): the acknowledged ones."""
    concurrent.futures.wait(list(futures.values()), timeout=deadline_s)
    return [n for n, f in futures.items() if f.done() and f.exception() is None]


@pytest.mark.slow  # a storm, a stop and a restart
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_a_stop_mid_storm_is_prompt_and_the_restart_finds_whole_topics(tmp_path: Path, stop):
    log_dir = tmp_path / "logs"
    partitions = 300  # 2,700 logs to make: none made yet when the storm is acknowledged
    clients: list[AdminClient] = []
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        futures = storm(server.bootstrap, partitions, clients)
        acknowledged = _acknowledged(futures)
        assert acknowledged, "no topic was acknowledged"
        assert len(list(log_dir.glob("storm-*"))) < len(acknowledged) * partitions, (
            "every log was made before the stop: nothing was tested"
        )
        if stop == "sigkill":
            server.kill()
        else:
            assert server.terminate(EXIT_BOUND_S) == 0, server.stderr_text()[-3000:]
            assert "Traceback" not in server.stderr_text()
    started = time.monotonic()
    with ServeProcess(log_dir, stderr=tmp_path / "serve2.err") as server:
        made = len(list(log_dir.glob("storm-*")))
        assert time.monotonic() - started < RESTART_BOUND_S, "the restart waited for the logs"
        assert made < len(acknowledged) * partitions, "the restart made every log, then listened"
        listed = _complete_or_absent(server.bootstrap, acknowledged, partitions)
        assert server.terminate(30) == 0
    verify = run_kafkalog(
        "dump", "--verify", "--summary", *sorted(log_dir.glob("storm-*")), timeout=120
    )
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    assert len(list(log_dir.glob("storm-*"))) == len(listed) * partitions
