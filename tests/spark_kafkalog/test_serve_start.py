"""What ``kafkalog serve`` loads before it answers: the structure that keeps its start short and
its memory small (benchmarks/serve.py measures both beside Kafka 3.9; no timing here).

- The serve entry, imported as the command line imports it and started on a fresh log dir,
  loads neither the Spark read path (pyarrow, pyspark, the data source, the columnar decoder)
  nor hypothesis (which kio would load, when importable, to register a strategy per type), and
  no message schema of Produce, Fetch, Metadata or ApiVersions: each version's classes load on
  its first request.
- Nor numba (nor llvmlite), also after serving produce (acks=1 and all, the leader's checks) and
  fetch (from the start and from the middle of a segment: the seek from the index position,
  read_committed): the request path runs the one header walk as written
  (``entry_scan``); the compiled walk loads only with the cleaner or a Spark read.
- A started server answers ApiVersions first, then a Metadata version whose classes nothing
  loaded before.
- Registration still refuses a version kio has no schema for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ROOT, ServeProcess, child_env

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")

from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.api_versions.v3.response import ApiVersionsResponse  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest  # noqa: E402
from kio.schema.metadata.v12.response import MetadataResponse  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

from broker_embedded.server.api_version_manager import ApiVersionManager  # noqa: E402
from broker_embedded.server.protocol import has_schemas  # noqa: E402
from tests.broker_embedded.server._net import RawClient, request_frame  # noqa: E402

TIMEOUT_S = 120.0
READ_PATH = ("pyarrow", "pyspark", "datasource", "broker_embedded.record.columnar_decoder")
LAZY_APIS = ("produce", "fetch", "metadata", "api_versions")

# the serve command's modules imported as cli._run_serve does, its server started and stopped
_START = """
import importlib, json, sys, tempfile
from pathlib import Path
from spark_kafkalog import cli
sc = cli._needs_kio("the server", lambda: importlib.import_module("spark_kafkalog.serve_command"))
security = sc.SecurityConfig()
listeners = sc.parse_listeners("PLAINTEXT://127.0.0.1:0", security.protocol_map)
with tempfile.TemporaryDirectory() as d:
    served = sc.open_brokers(Path(d) / "logs", sc.BrokerConfig(), 1, listeners, security, None)
    served.start_all()
    try:
        print(json.dumps(sorted(sys.modules)))
    finally:
        served.shutdown()
"""


# the same, then produce and fetch through confluent-kafka (librdkafka: no Python module of its own
# that would load numba) against it, in the same process
_SERVE = """
import importlib, json, sys, tempfile
from pathlib import Path
import confluent_kafka as ck
from spark_kafkalog import cli
sc = cli._needs_kio("the server", lambda: importlib.import_module("spark_kafkalog.serve_command"))
security = sc.SecurityConfig()
listeners = sc.parse_listeners("PLAINTEXT://127.0.0.1:0", security.protocol_map)
with tempfile.TemporaryDirectory() as d:
    served = sc.open_brokers(Path(d) / "logs", sc.BrokerConfig(), 1, listeners, security, None)
    bootstrap = served.start_all()[0].rsplit("//", 1)[1]
    try:
        for acks in ("1", "all"):
            p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
            for i in range(2000):
                p.produce("nf", value=b"v%d" % i, partition=0)
            assert p.flush(30) == 0
        got = []
        for start in (0, 1500):
            c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "nf",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
            c.assign([ck.TopicPartition("nf", 0, start)])
            m = c.poll(30)
            got.append([m.offset(), m.value().decode()])
            c.close()
        print(json.dumps([got, sorted(sys.modules)]))
    finally:
        served.shutdown()
"""


def test_the_started_server_loaded_no_read_path_module_and_no_lazy_schema() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _START],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=TIMEOUT_S,
        check=True,
    )
    modules = json.loads(done.stdout)
    assert [m for m in READ_PATH if m in modules] == []
    assert "hypothesis" not in modules
    schemas = [m for m in modules if m.startswith("kio.schema.") and m.count(".") == 4]
    assert [m for m in schemas if m.split(".")[2] in LAZY_APIS] == []


def test_serving_produce_and_fetch_loads_no_numba() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=TIMEOUT_S,
        check=True,
    )
    got, modules = json.loads(done.stdout.splitlines()[-1])
    assert got == [[0, "v0"], [1500, "v1500"]]
    assert [m for m in modules if m.split(".")[0] in ("numba", "llvmlite", *READ_PATH)] == []


def test_a_started_server_answers_api_versions_then_a_metadata_version_loaded_on_use(
    tmp_path: Path,
) -> None:
    with ServeProcess(tmp_path / "logs", stderr=tmp_path / "serve.err") as served:
        port = served.ports[0]
        with RawClient(port) as client:
            hello = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            client.send(request_frame(hello, 7))
            versions, _ = entity_reader(ApiVersionsResponse)(client.recv_frame(), 4)
            everything = MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            client.send(request_frame(everything, 8))
            frame = client.recv_frame()
        assert served.terminate() == 0
    assert versions.error_code == ErrorCode.none
    assert (18, 0, 4) in [(k.api_key, k.min_version, k.max_version) for k in versions.api_keys]
    assert frame[:4] == (8).to_bytes(4, "big")
    metadata, size = entity_reader(MetadataResponse)(frame, 5)  # header v1: one empty tag byte
    assert 5 + size == len(frame)
    assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [(0, "127.0.0.1", port)]
    assert metadata.topics == ()


def test_registration_checks_kio_index_for_every_version() -> None:
    assert has_schemas(3, 12) and has_schemas(18, 0)
    assert not has_schemas(3, 99) and not has_schemas(9999, 0)
    versions = ApiVersionManager()
    with pytest.raises(ValueError, match=r"no kio schema for api key 3 \(Metadata\) v14"):
        versions.register(3, 0, 99)  # kio knows Metadata up to v13
    with pytest.raises(ValueError, match=r"no kio schema for api key 9999 \(unknown\) v0"):
        versions.register(9999, 0, 0)
    assert versions.ranges() == ()
