"""The ``wire`` fuzz target: mutated request frames against a live ``kafkalog serve`` request path.

Setup (:meth:`WireTarget.create`): one in-process :class:`BrokerServer` over a :class:`Broker`
on a temporary log dir (loopback, port 0, a PLAINTEXT and a SASL_PLAINTEXT listener, two
network threads and one handler thread, so that a request holding the handler stalls the
probe), with topic ``wire-data`` (two partitions holding v2 batches of every codec: the probe's
known bytes, read from the segment files) and ``wire-in`` (the target of the Produce frames).
The corpus (``_fuzz_wire_frames``) holds the valid frames of every served API and version.

A share ``SASL_SHARE`` of the inputs are SASL exchanges with one mutated SaslHandshake or
SaslAuthenticate frame, against the SASL listener (``_fuzz_wire_sasl``, with its own probe: a
valid SCRAM login). The other inputs (:meth:`WireTarget.run`): a corpus frame mutated
(``_fuzz_wire_frames.mutate_frame``) and delivered one of four ways (``Plan``): whole on a fresh
connection, in random chunks with short pauses, on the connection reused from earlier inputs, or
cut at a random byte and hung up. The responses are read within ``READ_S`` (a request the
server may legitimately hold, such as a Fetch whose mutated wait is long, is not waited for).
The oracle, each violation a ``Finding``:

- ``probe``: afterwards a fresh connection gets, within ``PROBE_S``, an ApiVersions answer, a
  Metadata answer naming both partitions of ``wire-data`` and a Fetch of both partitions whose
  records are exactly the bytes of their segment files;
- ``response``: every response frame carries the correlation id of the request it answers, in
  request order (a Produce with acks=0 has none), and decodes with the response schema of the
  request's API key and version (ApiVersions above ours: the v0 fallback) to its last byte;
- ``log``: the server logged nothing but the one-line messages of a connection problem
  (``closing connection from``, ``refused connection from``, ``cannot pin``): a traceback, an
  ERROR line or an exception type in a line is a finding;
- ``threads``: a thread the server started is no longer alive;
- ``corrupt``: a batch of the log dir fails its CRC or structure check (checked every
  ``LOG_CHECK_EVERY`` inputs while serving, and at the end after shutdown, with ``kafkalog
  consume --log-dir`` reading every partition);
- ``fds`` / ``memory``: sockets and other descriptors outside the log dir grew by more than
  ``FD_SLACK`` over the campaign, or the process's RSS passed the campaign's bound.

Thread safety: a target is driven by one thread (the campaign's); the captured log records
come from the server's threads under the logging handler's lock.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import logging
import os
import random
import re
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic

from benchmarks._fuzz_corpus import CODECS, v2_batch
from benchmarks._fuzz_logdir import read_consume
from benchmarks._fuzz_oracle import Finding
from benchmarks._fuzz_wire_frames import (
    TOPIC_DATA,
    TOPIC_IN,
    Context,
    Frame,
    build_corpus,
    frame_of,
    mutate_frame,
    split_frames,
)
from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import KafkaLogError
from broker_embedded.protocol.schemas import reader_of, request_schema, response_schema
from broker_embedded.record.records import iter_batches
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from broker_embedded.storage.topic_partition import TopicPartition

READ_S = 0.5  # how long one input's responses are waited for
PROBE_S = 5.0  # the bound of each probe call
LOG_CHECK_EVERY = 500
CLOSE_S = 30.0  # the bound of stopping the server and closing its broker at the end
FD_SLACK = 20
SASL_SHARE = 0.2  # of the inputs: a SASL exchange on the SASL listener
ALLOWED_LOG = ("closing connection from ", "refused connection from ", "cannot pin ")
_EXCEPTION = re.compile(r"\b(\w+(?:Error|Exception)|struct\.error|Traceback)\b")
_DOMAIN = re.compile(
    r"\b(InvalidRequestError|KafkaApiError|ConnectionResetError|"
    r"BrokenPipeError|ConnectionError|BrokerClosedError)\b"
)
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
API_VERSIONS = 18


class LogCapture(logging.Handler):
    """Every WARNING+ record of the ``broker_embedded`` loggers logged by one of ``threads``
    (the server's: other targets' brokers log on the campaign's thread), kept until drained."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.threads: frozenset[int | None] = frozenset()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread in self.threads:
            self.records.append(record)  # emit runs under the handler's lock

    def drain(self) -> list[logging.LogRecord]:
        with self.lock or contextlib.nullcontext():
            out, self.records = self.records, []
        return out


def bad_log_line(record: logging.LogRecord) -> str | None:
    """Why a captured record is a finding, or None for an allowed one-line message."""
    message = record.getMessage()
    if record.exc_info or record.levelno >= logging.ERROR:
        return f"{record.levelname} {record.name}: {message}"
    if not message.startswith(ALLOWED_LOG):
        return f"unexpected {record.levelname} line {record.name}: {message}"
    found = [e for e in _EXCEPTION.findall(message) if not _DOMAIN.fullmatch(e)]
    return f"exception type {found[0]} in: {message}" if found else None


@dataclass(frozen=True)
class Plan:
    """How an input's bytes are delivered (see the module docstring)."""

    how: str  # "whole", "chunks", "reuse" or "hangup"
    chunks: tuple[int, ...] = ()  # "chunks": the sizes of the writes
    cut: int = 0  # "hangup": bytes sent before closing

    @classmethod
    def draw(cls, data: bytes, rng: random.Random) -> Plan:
        how = rng.choice(("whole", "whole", "chunks", "reuse", "reuse", "hangup"))
        if how == "chunks":
            sizes, left = [], len(data)
            while left > 0 and len(sizes) < 64:
                sizes.append(min(left, rng.choice((1, 2, 3, 4, 7, 13, 64, 512))))
                left -= sizes[-1]
            return cls(how, tuple(sizes))
        if how == "hangup":
            return cls(how, cut=rng.randrange(len(data) + 1))
        return cls(how)


@dataclass
class Server:
    """The live server of the target and what it must keep answering."""

    base: Path
    broker: Broker
    server: BrokerServer
    capture: LogCapture
    expected: dict[int, bytes]  # wire-data partition -> its segment's bytes
    threads: tuple[threading.Thread, ...]

    @property
    def port(self) -> int:
        return self.server.endpoints[0].port

    @property
    def sasl_port(self) -> int:
        return self.server.endpoints[1].port

    @property
    def log_dir(self) -> Path:
        return self.base / "log"


def start_server(base: Path) -> Server:
    """See the module docstring: topics with known data, a started server, logs captured."""
    log_dir = base / "log"
    before = set(threading.enumerate())
    # one handler thread: a request that holds it stalls the probe, which makes it a finding
    config = dataclasses.replace(BrokerConfig(), num_io_threads=1, num_network_threads=2)
    broker = Broker(log_dir, create=True, config=config)
    broker.create_topic(TOPIC_DATA, 2)
    broker.create_topic(TOPIC_IN, 2)
    for partition in (0, 1):
        for i, codec in enumerate(CODECS):
            broker.produce(TOPIC_DATA, partition, v2_batch(0, codec, 2 + i + partition))
    expected = {
        p: (log_dir / f"{TOPIC_DATA}-{p}" / "00000000000000000000.log").read_bytes() for p in (0, 1)
    }
    capture = LogCapture()
    logging.getLogger("broker_embedded").addHandler(capture)
    from benchmarks import _fuzz_wire_sasl as sasl  # it imports this module

    sasl.add_user(log_dir)
    listeners = ["PLAINTEXT://127.0.0.1:0", f"{sasl.LISTENER}://127.0.0.1:0"]
    server = broker_server(broker, listeners, security=sasl.security())
    server.start()
    threads = tuple(t for t in threading.enumerate() if t not in before)
    capture.threads = frozenset(t.ident for t in threads)
    return Server(base, broker, server, capture, expected, threads)


# -- the probe -------------------------------------------------------------------------------------


class Conn:
    """One blocking client connection with a timeout; frames in and out."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def recv_exact(self, n: int) -> bytes:
        data = self.reader.read(n)  # the buffered reader loops until n bytes or the end
        if len(data) != n:
            raise ConnectionError(f"closed with {n - len(data)} bytes still expected")
        return data

    def recv_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self.recv_exact(4))
        if not 0 <= size <= 64 << 20:
            raise ConnectionError(f"response frame size {size}")
        return self.recv_exact(size)

    def call(self, message: Any, correlation_id: int) -> Any:
        frame = frame_of(message, correlation_id, "probe")
        self.sock.sendall(frame)
        return decode_response(frame[4:], self.recv_frame())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
            self.sock.close()


def probe(server: Server, index: int) -> None:
    """ApiVersions, Metadata and a Fetch of the known bytes on a fresh connection."""
    try:
        conn = Conn(server.port, PROBE_S)
    except OSError as e:
        raise Finding("probe", f"cannot connect: {e!r}") from None
    try:
        _probe_calls(conn, server, index)
    except (OSError, ValueError) as e:
        raise Finding("probe", f"no answer: {type(e).__name__}: {e}") from None
    finally:
        conn.close()


def _probe_calls(conn: Conn, server: Server, index: int) -> None:
    corr = (index % 1_000_000) * 3
    versions = conn.call(
        ApiVersionsRequest(client_software_name="probe", client_software_version="1"), corr + 1
    )
    if versions.error_code != 0 or not any(k.api_key == 1 for k in versions.api_keys):
        raise Finding("probe", f"ApiVersions answered {versions!r:.300}")
    meta = conn.call(MetadataRequest(topics=(MetadataRequestTopic(name=TOPIC_DATA),)), corr + 2)
    topics = [(t.name, t.error_code, len(t.partitions)) for t in meta.topics]
    if topics != [(TOPIC_DATA, 0, 2)]:
        raise Finding("probe", f"Metadata of {TOPIC_DATA} answered {topics}")
    size = max(len(b) for b in server.expected.values())
    fetch = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=2 * size,
        isolation_level=0,
        topics=(
            FetchTopic(
                topic=TOPIC_DATA,
                partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=len(b))
                    for p, b in server.expected.items()
                ),
            ),
        ),
    )
    got = {
        p.partition_index: (p.error_code, p.records)
        for t in conn.call(fetch, corr + 3).responses
        for p in t.partitions
    }
    want = {p: (0, b) for p, b in server.expected.items()}
    if got != want:
        summary = {p: (e, len(r or b"")) for p, (e, r) in got.items()}
        raise Finding(
            "probe",
            f"Fetch of {TOPIC_DATA} answered (error, bytes) {summary}, "
            f"expected {[(0, len(b)) for b in server.expected.values()]}",
        )


# -- responses -------------------------------------------------------------------------------------


def decode_response(request: bytes, response: bytes) -> Any:
    """The response body to ``request`` (a frame without its size), by the request's API key and
    version; ValueError when the correlation id differs or the bytes do not decode exactly."""
    api_key, version, corr = _HEAD.unpack_from(request, 0)
    (got,) = struct.unpack_from(">i", response, 0)
    if got != corr:
        raise ValueError(f"correlation id {got}, the request's is {corr}")
    schema = response_schema(api_key, version)
    if api_key == API_VERSIONS and (schema is None or version > 4):
        schema = response_schema(API_VERSIONS, 0)  # the fallback for a version above ours
    if schema is None:
        raise ValueError(f"a response to api key {api_key} v{version}, which has no schema")
    offset = 5 if schema.__flexible__ and api_key != API_VERSIONS else 4
    if offset == 5 and response[4] != 0:
        raise ValueError(f"response header tagged fields {response[4:12].hex()}")
    try:
        body, size = reader_of(schema)(memoryview(response), offset)
    except Exception as e:  # kio's reader raises several types; all mean undecodable
        raise ValueError(f"{schema.__name__} v{version} does not decode: {e!r}") from None
    if offset + size != len(response):
        raise ValueError(
            f"{schema.__name__} v{version}: {len(response) - offset - size} "
            "bytes left after the body"
        )
    return body


def expects_response(request: bytes) -> bool:
    """False for a Produce with acks=0 (no response), judged by parsing it as the server may."""
    api_key, version, _ = _HEAD.unpack_from(request, 0)
    schema = request_schema(api_key, version) if api_key == 0 else None
    if schema is None:
        return True
    for offset in _body_offsets(request, schema.__flexible__):
        try:
            body, _ = reader_of(schema)(memoryview(request), offset)
        except Exception:
            continue
        return body.acks != 0
    return True


def _body_offsets(request: bytes, flexible: bool) -> Iterator[int]:
    (client_len,) = struct.unpack_from(">h", request, 8)
    end = 10 + max(client_len, 0)
    if not flexible:
        yield end
    elif end < len(request):
        yield end + 1  # no tagged fields in the header (what the corpus sends)


def check_responses(requests: list[bytes], responses: list[bytes]) -> None:
    """Responses in request order, each answering its request (see the module docstring)."""
    pending = list(requests)
    for response in responses:
        while pending and not expects_response(pending[0]) and not _answers(pending[0], response):
            pending.pop(0)
        if not pending:
            raise Finding("response", f"a response to no request: {response[:40].hex()}")
        request = pending.pop(0)
        key, version, _ = _HEAD.unpack_from(request, 0)
        try:
            decode_response(request, response)
        except ValueError as e:
            raise Finding("response", f"api key {key} v{version}: {e}") from None


def _answers(request: bytes, response: bytes) -> bool:
    return response[:4] == request[4:8]


# -- the target ------------------------------------------------------------------------------------


@dataclass
class WireTarget:
    """The live server, the corpus and the connection reused across inputs."""

    server: Server
    corpus: list[Frame]
    reused: Conn | None = None
    fds: list[int] = field(default_factory=list)  # descriptors outside the log dir, sampled
    inputs: int = 0

    @classmethod
    def create(cls, base: Path) -> WireTarget:
        server = start_server(base)
        return cls(server, build_corpus(corpus_context(server)))

    def run(self, index: int, rng: random.Random) -> tuple[dict, list[Finding]]:
        """One input; what reproduces it (the bytes and the plan) and its findings. A share
        :data:`SASL_SHARE` of the inputs are SASL exchanges (``_fuzz_wire_sasl``)."""
        if rng.random() < SASL_SHARE:
            return self.run_sasl(index, rng)
        frame, other = rng.choice(self.corpus), rng.choice(self.corpus)
        data, kind = mutate_frame(frame, other, rng)
        plan = Plan.draw(data, rng)
        reproducer = {
            "frame": frame.name,
            "mutation": kind,
            "plan": plan.__dict__,
            "input_base64": base64.b64encode(data).decode("ascii"),
        }
        return reproducer, self.deliver(index, data, plan)

    def run_sasl(
        self, index: int, rng: random.Random, replay: tuple[Any, bytes] | None = None
    ) -> tuple[dict, list[Finding]]:
        """One SASL input (drawn, or ``replay``: its plan and bytes); reproducer, findings."""
        from benchmarks import _fuzz_wire_sasl as sasl

        plan = sasl.SaslInput.draw(rng) if replay is None else replay[0]
        found: list[Finding] = []
        self.inputs += 1
        data, kind = b"", "none"
        try:
            data, kind = sasl.deliver(
                self.server.sasl_port,
                plan,
                rng,
                rng.choice(self.corpus),
                None if replay is None else replay[1],
            )
        except Finding as f:
            found.append(f)
        checks = (lambda: sasl.sasl_probe(self.server.sasl_port),)
        return sasl.reproducer(plan, data, kind), self._check(index, found, checks)

    def deliver(self, index: int, data: bytes, plan: Plan) -> list[Finding]:
        found: list[Finding] = []
        self.inputs += 1
        try:
            self._send(data, plan)
        except Finding as f:
            found.append(f)
        return self._check(index, found)

    def _check(self, index: int, found: list[Finding], extra: tuple = ()) -> list[Finding]:
        """The oracle after one input (module docstring): ``found`` and what it finds."""
        checks = (lambda: probe(self.server, index), *extra, self._check_logs, self._check_threads)
        for check in checks:
            try:
                check()
            except Finding as f:
                found.append(f)
        if self.inputs % LOG_CHECK_EVERY == 0:
            found += self.sample(final=False)
        return found

    def _send(self, data: bytes, plan: Plan) -> None:
        requests, whole = split_frames(data, self.server.broker.config.socket_request_max_bytes)
        conn = self._connection(plan)
        keep = False
        try:
            if plan.how == "hangup":
                conn.sock.sendall(data[: plan.cut])
                return
            for piece in _pieces(data, plan):
                conn.sock.sendall(piece)
                if plan.how == "chunks":
                    time.sleep(0.001)
            responses, open_ = read_responses(conn, len(requests))
            keep = plan.how == "reuse" and whole and open_ and len(responses) == len(requests)
            check_responses(requests, responses)
        except OSError:
            pass  # the server closed the connection: allowed; the probe judges the rest
        finally:
            if not keep:
                conn.close()
                if conn is self.reused:
                    self.reused = None

    def _connection(self, plan: Plan) -> Conn:
        if plan.how != "reuse":
            return Conn(self.server.port, PROBE_S)
        if self.reused is None:
            self.reused = Conn(self.server.port, PROBE_S)
        return self.reused

    def _check_logs(self) -> None:
        for record in self.server.capture.drain():
            why = bad_log_line(record)
            if why is not None:
                exc = ""
                if record.exc_info:
                    exc = "\n" + logging.Formatter().formatException(record.exc_info)
                raise Finding("log", why + exc)

    def _check_threads(self) -> None:
        dead = [t.name for t in self.server.threads if not t.is_alive()]
        if dead:
            raise Finding("threads", f"server threads ended: {dead}")

    def sample(self, *, final: bool) -> list[Finding]:
        """Descriptors sampled; every batch of the log dir checked (see the module docstring)."""
        self.fds.append(fds_outside(self.server.log_dir))
        found = []
        if len(self.fds) > 2 and self.fds[-1] > self.fds[1] + FD_SLACK:
            found.append(
                Finding(
                    "fds",
                    f"descriptors outside the log dir grew from {self.fds[1]} to {self.fds[-1]}",
                )
            )
        try:
            check_log_dir(self.server.log_dir, tail="error" if final else "stop")
        except Finding as f:
            found.append(f)
        return found

    def close(self) -> list[Finding]:
        """Stop the server (its threads must still be alive) and check the log dir whole."""
        found = []
        try:
            self._check_threads()
        except Finding as f:
            found.append(f)
        if self.reused is not None:
            self.reused.close()
        stopping = threading.Thread(target=self._stop, name="wire-fuzz-stop", daemon=True)
        stopping.start()
        stopping.join(CLOSE_S)
        logging.getLogger("broker_embedded").removeHandler(self.server.capture)
        if stopping.is_alive():  # a handler still holds the broker: its files may still change
            return [*found, Finding("hang", f"shutdown and broker close took over {CLOSE_S} s")]
        try:
            self._check_logs()
        except Finding as f:
            found.append(f)
        found += self.sample(final=True)
        found += consume_all(self.server.log_dir)
        shutil.rmtree(self.server.base, ignore_errors=True)
        return found

    def _stop(self) -> None:
        self.server.server.shutdown(10.0)
        self.server.broker.close()


def _pieces(data: bytes, plan: Plan) -> Iterator[bytes]:
    if plan.how != "chunks":
        yield data
        return
    pos = 0
    for size in plan.chunks:
        yield data[pos : pos + size]
        pos += size
    if pos < len(data):
        yield data[pos:]


def read_responses(conn: Conn, expected: int) -> tuple[list[bytes], bool]:
    """Up to ``expected`` response frames within ``READ_S``; and whether the connection is open."""
    responses: list[bytes] = []
    deadline = time.monotonic() + READ_S
    while len(responses) < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            return responses, True
        conn.sock.settimeout(left)
        try:
            responses.append(conn.recv_frame())
        except TimeoutError:
            return responses, False  # maybe mid-frame: not reusable
        except ConnectionError:
            return responses, False
    conn.sock.settimeout(PROBE_S)
    return responses, True


def corpus_context(server: Server) -> Context:
    """Topic ids, served versions and a live fetch session for the corpus."""
    ids = {name: server.broker.describe_topic(name).topic_id for name in (TOPIC_DATA, TOPIC_IN)}
    ranges = tuple(
        (r.api_key, r.min_version, r.max_version) for r in server.server.versions.ranges()
    )
    return Context(ids, open_session(server, ids), ranges)


def open_session(server: Server, ids: dict) -> int:
    """A fetch session's id (Fetch v12 with session 0, epoch 0)."""
    from benchmarks._fuzz_wire_frames import build_message

    schema = request_schema(1, 12)
    message = build_message(
        schema, {"topic": TOPIC_DATA, "session_epoch": 0, "forgotten_topics_data": ()}
    )
    conn = Conn(server.port, PROBE_S)
    try:
        return conn.call(message, 1).session_id
    finally:
        conn.close()


def fds_outside(log_dir: Path) -> int:
    """This process's open descriptors that are not files under ``log_dir``."""
    count, prefix = 0, str(log_dir)
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if not os.readlink(f"/proc/self/fd/{name}").startswith(prefix):
                count += 1
    return count


def check_log_dir(log_dir: Path, tail: str) -> None:
    """Every batch of every segment structurally valid with a correct CRC."""
    for path in sorted(log_dir.glob("*-*/*.log")):
        try:
            for batch in iter_batches(path.read_bytes(), str(path), tail=tail):  # type: ignore[arg-type]
                batch.ensure_valid()
        except KafkaLogError as e:
            raise Finding("corrupt", f"{path.relative_to(log_dir)}: {e}") from None


def consume_all(log_dir: Path) -> list[Finding]:
    """``kafkalog consume --log-dir`` of every partition reads without an error."""
    found = []
    for directory in sorted(p for p in log_dir.glob("*-*") if p.is_dir()):
        topic, _, partition = directory.name.rpartition("-")
        if not partition.isdigit() or ".delete" in directory.name:
            continue
        try:
            if read_consume(log_dir, TopicPartition(topic, int(partition))) is None:
                found.append(Finding("corrupt", f"consume of {directory.name} failed"))
        except Finding as f:
            found.append(f)
    return found


def replay_wire(rep: dict, base: Path) -> int:
    """Send a saved input to a fresh server as it was sent; print the findings (exit 1)."""
    if "input_base64" not in rep:
        print("a final check of a campaign: run the campaign again with its seed")
        return 2
    data = base64.b64decode(rep["input_base64"])
    target = WireTarget.create(base / "wire")
    found: list[Finding] = []
    try:
        if "sasl" in rep:
            from benchmarks._fuzz_wire_sasl import SaslInput

            replayed = (SaslInput(**rep["sasl"]), data)
            found += target.run_sasl(0, random.Random(0), replayed)[1]
        else:
            plan = rep["plan"]
            how = Plan(plan["how"], tuple(plan["chunks"]), plan["cut"])
            found += target.deliver(0, data, how)
    finally:
        found += target.close()
        shutil.rmtree(base, ignore_errors=True)
    for f in found:
        print(f"  now: {f.kind}: {f.detail[:2000]}")
    if not found:
        print("  now: no finding")
    return 1 if found else 0
