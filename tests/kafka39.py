"""Apache Kafka 3.9 as the reference for the tests: one broker per test session, its tools.

The peer is found only through ``KAFKALOG_PEERS`` (a folder holding ``kafka-3.9/``, see
benchmarks/_serve_peers.py); without it, or without Java, the tests that need it skip and say
why. :func:`kafka_broker` starts a broker (tests/conftest.py's ``kafka39`` fixture: one for the
session, shared by the tests, each with its own topics and groups). :func:`kafka_tool` runs one
of Kafka's ``bin/kafka-*.sh`` tools, bounded. The same folder holds Spark's own Kafka connector
(:func:`spark_connector_jars`, from benchmarks/_serve_peers.py, which the benchmarks share).
"""

from __future__ import annotations

import atexit
import base64
import os
import re
import select
import shutil
import struct
import subprocess
import tempfile
import time
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
__all__ = [
    "kafka_broker",
    "kafka_tool",
    "kafka39_home",
    "secured_kafka_broker",
    "spark_connector_jars",
]
# peer.sh's node settings (one node, 3 partitions per internal topic, no initial rebalance
# delay), after each broker's listeners
NODE_PROPERTIES = """\
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

SCRAM = "SCRAM-SHA-256"
# A listener that needs SCRAM-SHA-256, Kafka's StandardAuthorizer, no access without an ACL;
# the settings not named are peer.sh's (node 1, 3 partitions per internal topic, no initial
# rebalance delay). ANONYMOUS is the controller listener's principal (plaintext, inside the JVM).
SECURED_PROPERTIES = (
    """\
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
"""
    + NODE_PROPERTIES
)


def kafka39_home() -> Path:
    """Kafka 3.9's folder, or a skip naming what is missing."""
    home = kafka_home()
    if isinstance(home, str):
        pytest.skip(f"needs Apache Kafka 3.9: {home}")
    return home


@contextmanager
def kafka_broker(run_dir: Path, overrides: dict[str, str] | None = None) -> Iterator[Server]:
    """A running Kafka 3.9 whose data and logs are in ``run_dir`` (skips without the peer).
    ``overrides``: broker settings on top of peer.sh's (``{"log.cleaner.backoff.ms": "500"}``),
    given to ``kafka.Kafka`` as ``--override``; then the broker is started here as peer.sh would
    (:data:`PLAIN_PROPERTIES`), as peer.sh has no way to take them."""
    if not overrides:
        with kafka_server(kafka39_home(), run_dir) as server:
            yield server
        return
    port, cport = _free_port(), _free_port()
    text = PLAIN_PROPERTIES.format(port=port, cport=cport, data=run_dir / "data")
    extra = [arg for k, v in overrides.items() for arg in ("--override", f"{k}={v}")]
    with _own_kafka("Kafka 3.9", run_dir, text, port, [], extra) as server:
        yield server


# peer.sh's settings (one node, loopback, 3 partitions per internal topic, no initial
# rebalance delay), for a broker :func:`kafka_broker` starts with overrides
PLAIN_PROPERTIES = (
    """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""
    + NODE_PROPERTIES
)


@contextmanager
def _own_kafka(
    name: str, run_dir: Path, properties: str, port: int, format_args: list[str], args: list[str]
) -> Iterator[Server]:
    """Kafka 3.9 with ``properties`` (its storage formatted first unless ``run_dir/data`` has
    been), ``args`` after the properties file; stopped on every path out."""
    home = kafka39_home()
    run_dir.mkdir(parents=True, exist_ok=True)
    props = run_dir / "server.properties"
    props.write_text(properties)
    log4j = f"-Dlog4j.configuration=file:{home}/config/log4j.properties"
    java = ["java", "-Xmx512m", f"-Dkafka.logs.dir={run_dir}", log4j, "-cp", f"{home}/libs/*"]
    if not (run_dir / "data" / "meta.properties").exists():
        subprocess.run(
            [
                *java,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                _cluster_id(),
                "-c",
                str(props),
                *format_args,
            ],
            capture_output=True,
            timeout=KAFKA_START_S,
            check=True,
        )
    out = run_dir / "kafka.out"
    with _child(name, [*java, "kafka.Kafka", str(props), *args], out) as (proc, _):
        answered = first_answer(name, proc, out, port, KAFKA_START_S)
        yield Server(name, port, proc.pid, answered - process_started_at(proc.pid))


@contextmanager
def secured_kafka_broker(run_dir: Path, user: str, password: str) -> Iterator[Server]:
    """A running Kafka 3.9 as :data:`SECURED_PROPERTIES` configures it, ``user`` a super user
    with a SCRAM-SHA-256 credential (written when its storage is formatted); skips without the
    peer."""
    port, cport = _free_port(), _free_port()
    text = SECURED_PROPERTIES.format(
        port=port, cport=cport, scram=SCRAM, user=user, password=password, data=run_dir / "data"
    )
    scram = ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
    with _own_kafka("Kafka 3.9 (SASL)", run_dir, text, port, scram, []) as server:
        yield server


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
    """``bin/<tool>.sh ARGS`` of Kafka 3.9 (its log4j output in ``work``), its output captured
    as text; ``check``: a non-zero exit raises with the tool's output. The tool's main class
    (the one its script hands to kafka-run-class.sh) runs in this process's one
    :class:`ToolRunner` JVM when javac is there to build it (a JVM per tool run would take 2-5 s
    each), else in a JVM of its own through its script (256 MB heap)."""
    home = kafka39_home()
    argv = [str(home / "bin" / f"{tool}.sh"), *map(str, args)]
    runner = ToolRunner.shared(home)
    if runner is not None:
        done = runner.run(argv, _main_class(home, tool), work, stdin, timeout)
    else:
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256m", LOG_DIR=str(work))
        done = subprocess.run(
            argv, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(map(str, args))} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done


_RUN_CLASS = re.compile(r"kafka-run-class\.sh\s+([\w.$]+)")


def _main_class(home: Path, tool: str) -> str:
    """The main class ``bin/<tool>.sh`` runs (its ``kafka-run-class.sh CLASS "$@"`` line)."""
    script = (home / "bin" / f"{tool}.sh").read_text()
    found = _RUN_CLASS.findall(script)
    if len(found) != 1:
        raise AssertionError(f"bin/{tool}.sh: no single kafka-run-class.sh line ({found})")
    return found[0]


class ToolRunner:
    """One JVM (tests/KafkaToolRunner.java, compiled with javac into a temporary folder) that
    runs Kafka's tools one after another, each as its own JVM would (see the Java file): a
    request and its answer over the JVM's stdin / stdout. :meth:`shared` is this process's one
    runner, started at first use, ended at exit; a run that outlives its timeout kills it (the
    next run starts another). Not thread safe (the tests run one at a time per process)."""

    _shared: ToolRunner | None = None
    _unavailable = False
    # besides the script's options: a heap for many runs, and what the runner needs (its
    # SecurityManager sees System.exit; the shutdown hooks are read from java.lang)
    JVM = [
        "-Xmx512m",
        "-Djava.security.manager=allow",
        "--add-opens",
        "java.base/java.lang=ALL-UNNAMED",
    ]

    def __init__(self, home: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="kafka-tool-runner-"))
        source = Path(__file__).with_name("KafkaToolRunner.java")
        subprocess.run(
            ["javac", "-nowarn", "-Xlint:-removal", "-d", str(self.folder), str(source)],
            capture_output=True,
            check=True,
            timeout=TOOL_TIMEOUT_S,
        )
        options, classpath = self._script_java(home)
        self.log = self.folder / "runner.err"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    "java",
                    *options,
                    *self.JVM,
                    "-cp",
                    f"{self.folder}{os.pathsep}{classpath}",
                    "KafkaToolRunner",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        if self._read_int(TOOL_TIMEOUT_S) != 0:
            raise OSError("the tool runner did not start")

    def _script_java(self, home: Path) -> tuple[list[str], str]:
        """The JVM options and the class path bin/kafka-run-class.sh gives a tool (the jars in
        its order, which decides, say, the version the tools report): the script run with a
        ``java`` that prints its arguments. Without the heap option (the runner has its own)."""
        fake = self.folder / "print-args" / "bin" / "java"
        fake.parent.mkdir(parents=True)
        fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
        fake.chmod(0o755)
        env = dict(
            os.environ,
            JAVA_HOME=str(fake.parents[1]),
            KAFKA_HEAP_OPTS="-Xmx512m",
            LOG_DIR=str(self.folder),
        )
        done = subprocess.run(
            [str(home / "bin" / "kafka-run-class.sh"), "MAIN"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        args = done.stdout.splitlines()
        cp = args.index("-cp")
        return [a for a in args[:cp] if not a.startswith("-Xmx")], args[cp + 1]

    @classmethod
    def shared(cls, home: Path) -> ToolRunner | None:
        """This process's runner (None when javac is missing or the runner cannot start)."""
        if cls._shared is None and not cls._unavailable:
            try:
                if shutil.which("javac") is None:
                    raise OSError("no javac")
                cls._shared = cls(home)
                atexit.register(cls._shared.close)
            except (OSError, subprocess.SubprocessError):
                cls._unavailable = True
        return cls._shared

    def run(
        self, argv: list[str], main_class: str, work: Path, stdin: str | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``main_class``'s main with ``argv[1:]`` as a tool run: its exit status and output."""
        request = [self._string(main_class), self._string(str(work))]
        request.append(struct.pack(">i", -1) if stdin is None else self._string(stdin))
        request.append(struct.pack(">i", len(argv) - 1))
        request.extend(self._string(a) for a in argv[1:])
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"".join(request))
            self.proc.stdin.flush()
            deadline = time.monotonic() + timeout
            status = self._read_int(timeout)
            out = self._read_bytes(deadline).decode(errors="replace")
            err = self._read_bytes(deadline).decode(errors="replace")
        except BaseException:
            self.close()
            type(self)._shared = None
            raise
        return subprocess.CompletedProcess(argv, status, out, err)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    def _string(text: str) -> bytes:
        data = text.encode()
        return struct.pack(">i", len(data)) + data

    def _read_int(self, timeout: float) -> int:
        return struct.unpack(">i", self._read(4, time.monotonic() + timeout))[0]

    def _read_bytes(self, deadline: float) -> bytes:
        (size,) = struct.unpack(">i", self._read(4, deadline))
        return self._read(size, deadline)

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self.proc.args, TOOL_TIMEOUT_S)
            chunk = os.read(fd, size)
            if not chunk:
                raise OSError(f"the tool runner ended: {self.log.read_text()[-2000:]}")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)
