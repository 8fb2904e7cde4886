"""Apache Kafka 3.9 as the reference for the tests: one broker per test session, its tools.

The peer is found only through ``KAFKALOG_PEERS`` (a folder holding ``kafka-3.9/``, see
benchmarks/_serve_peers.py); without it, or without Java, the tests that need it skip and say
why. :func:`kafka_broker` starts a broker (tests/conftest.py's ``kafka39`` fixture: one for the
session, shared by the tests, each with its own topics and groups). :func:`kafka_tool` runs one
of Kafka's ``bin/kafka-*.sh`` tools, bounded. The same folder holds Spark's own Kafka connector
(:func:`spark_connector_jars`, from benchmarks/_serve_peers.py, which the benchmarks share).
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks._serve_peers import (
    KAFKA_START_S,
    Server,
    _child,
    _free_port,
    first_answer,
    kafka_home,
    kafka_server,
    process_started_at,
    spark_connector_jars,
)

TOOL_TIMEOUT_S = 180.0
__all__ = ["kafka_broker", "kafka_tool", "kafka39_home", "secured_kafka_broker",
           "spark_connector_jars"]  # fmt: skip
SCRAM = "SCRAM-SHA-256"
# A listener that needs SCRAM-SHA-256, Kafka's StandardAuthorizer, no access without an ACL;
# the settings not named are peer.sh's (node 1, 3 partitions per internal topic, no initial
# rebalance delay). ANONYMOUS is the controller listener's principal (plaintext, inside the JVM).
SECURED_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms={scram}
sasl.mechanism.inter.broker.protocol={scram}
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{user}" password="{password}";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{user};User:ANONYMOUS
allow.everyone.if.no.acl.found=false
log.dirs={data}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
"""


def kafka39_home() -> Path:
    """Kafka 3.9's folder, or a skip naming what is missing."""
    home = kafka_home()
    if isinstance(home, str):
        pytest.skip(f"needs Apache Kafka 3.9: {home}")
    return home


@contextmanager
def kafka_broker(run_dir: Path) -> Iterator[Server]:
    """A running Kafka 3.9 whose data and logs are in ``run_dir`` (skips without the peer)."""
    with kafka_server(kafka39_home(), run_dir) as server:
        yield server


@contextmanager
def secured_kafka_broker(run_dir: Path, user: str, password: str) -> Iterator[Server]:
    """A running Kafka 3.9 as :data:`SECURED_PROPERTIES` configures it, ``user`` a super user
    with a SCRAM-SHA-256 credential (written when its storage is formatted); skips without the
    peer."""
    home = kafka39_home()
    port, cport = _free_port(), _free_port()
    run_dir.mkdir(parents=True, exist_ok=True)
    props = run_dir / "server.properties"
    text = SECURED_PROPERTIES.format(port=port, cport=cport, scram=SCRAM, user=user,
                                     password=password, data=run_dir / "data")  # fmt: skip
    props.write_text(text)
    log4j = f"-Dlog4j.configuration=file:{home}/config/log4j.properties"
    java = ["java", "-Xmx512m", f"-Dkafka.logs.dir={run_dir}", log4j, "-cp", f"{home}/libs/*"]
    subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c",
         str(props), "--add-scram", f"{SCRAM}=[name={user},password={password}]"],
        capture_output=True, timeout=KAFKA_START_S, check=True,
    )  # fmt: skip
    out = run_dir / "kafka.out"
    with _child("Kafka 3.9 (SASL)", [*java, "kafka.Kafka", str(props)], out) as (proc, _):
        answered = first_answer("Kafka 3.9 (SASL)", proc, out, port, KAFKA_START_S)
        yield Server("Kafka 3.9 (SASL)", port, proc.pid, answered - process_started_at(proc.pid))


def _cluster_id() -> str:
    """A fresh cluster id as Kafka makes them (a UUID in URL-safe base64, unpadded, not
    starting with '-', which its tools would read as an option)."""
    while (text := base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())[0] == "-":
        pass
    return text


def kafka_tool(
    tool: str,
    *args: str | Path,
    work: Path,
    timeout: float = TOOL_TIMEOUT_S,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``bin/<tool>.sh ARGS`` of Kafka 3.9 (256 MB heap, its log4j output in ``work``), its
    output captured as text; ``check``: a non-zero exit raises with the tool's output."""
    home = kafka39_home()
    env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256m", LOG_DIR=str(work))
    done = subprocess.run(
        [str(home / "bin" / f"{tool}.sh"), *map(str, args)], env=env, input=stdin,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(map(str, args))} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done
