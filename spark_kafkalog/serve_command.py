"""``kafkalog serve``: the embedded broker on Kafka's wire protocol (Kafka's
``kafka-server-start``).

``kafkalog serve --log-dir DIR [--listeners L,...] [--brokers N] [--broker-config FILE]
[--metrics-port P [--metrics-host H]]``

- ``--brokers 1`` (the default): one :class:`Broker` owning ``DIR`` (created when missing or
  empty), behind one :class:`BrokerServer` on the listeners (``NAME://host:port``,
  comma-separated, as Kafka's ``listeners``; port 0 lets the OS pick). A listener's name maps
  to its security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) through the
  ``[security]`` table's ``listener.security.protocol.map`` of ``--broker-config`` (each
  protocol's name maps to itself by default); TLS and SASL settings are in that table too
  (``broker_embedded/server/security/security_config.py``). SASL users are those of
  ``DIR/scram-credentials.json`` (``kafkalog users``), read again when the file changes.
- ``--brokers N`` (2..:data:`MAX_BROKERS`): an in-process
  :class:`~broker_embedded.cluster.EmbeddedCluster` laid out as it lays itself out:
  ``DIR/broker-<i>/`` is broker ``i``'s log dir, ``DIR/controller.json`` the controller's
  state. Broker ``i`` listens on each listener's host at port ``port + i`` (port 0 stays 0: the
  OS picks one per broker). Metadata from any broker names every live broker and each
  partition's leader; a request for a partition a broker does not lead is answered
  NOT_LEADER_OR_FOLLOWER, and clients refresh their metadata.

Each broker's log dir is locked (``.lock``) while the server runs: a second writer naming it
(another ``kafkalog serve``, ``kafkalog topics``/``produce`` with ``--log-dir``) is refused with
the holder named. Readers take no lock (``kafkalog consume --log-dir``,
``spark.read.format("kafkalog")``) and read the log dir while the server appends to it.

Output: one line per listener of each broker on stdout, ``broker <id> listening on
<NAME>://<host>:<bound port>``, flushed at once (a script starting the server on port 0
reads the port there); at the end ``stopped``. The log (stderr, ``logging`` at INFO) has one
line per connection problem naming the client (server/processor.py), never a traceback for a
client's mistake.

Metrics (``--metrics-port``, off by default): broker ``i`` answers Prometheus on
``http://H:P+i/metrics`` (``H`` default 127.0.0.1; port 0: the OS picks one per broker), with
Kafka's metric names (broker_embedded/server/metrics_endpoint.py); after the listener lines one
line per broker, ``broker <id> metrics on http://<host>:<bound port>/metrics``. The endpoint
stays up across a broker's stop and start (it answers nothing while the broker is stopped).

Control (``--brokers`` > 1 only), one command a line on stdin, each answered with one line on
stdout: ``stop <id>`` (clean shutdown of one broker: its server drains, its logs are flushed;
the controller moves its leaderships to in-sync followers), ``kill <id>`` (as if that
broker's process died: its connections close after at most :data:`KILL_DRAIN_S`, then the
broker stops with nothing flushed and no clean-shutdown marker), ``start <id>`` (the stopped
broker recovers its log dir, rejoins, and listens on the port it had). A bad command is
answered ``error: ...``; the end of stdin ends the control, not the server.

Shutdown on SIGTERM or SIGINT, bounded by :data:`SHUTDOWN_TIMEOUT_S` per broker: stop
accepting, stop the admin queue (the background creation of answered topics' logs stops
after its current step and the next start makes the rest; waiting admin requests get their
connections closed: broker_embedded/server/admin_queue.py), let
in-flight requests be answered (an acks=all produce waiting for followers included) or close
their connections, stop the handler threads, close the connections; then
close the brokers (flush, checkpoints, clean-shutdown marker) and release the log dirs. Exit
status 0. A SIGKILL loses no acknowledged acks=all record: the log's recovery covers it.

Thread safety: :class:`ServedBrokers` serialises start, stop and shutdown under one lock; the
servers read :meth:`ServedBrokers.nodes` from their handler threads.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig, read_toml
from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import register_all
from broker_embedded.server.handlers.api_context import ApiContext, Node
from broker_embedded.server.metrics_endpoint import (
    KafkaCollector,
    MetricsEndpoint,
    enable_topic_stats,
)
from broker_embedded.server.security.authorizer import Authorizer, authorizer_for
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import (
    Listener,
    SecurityConfig,
    SecurityProtocol,
)
from broker_embedded.server.security.security_config import parse_listeners as listener_list
from broker_embedded.storage.log_dir import LogDir
from spark_kafkalog import cli_logging
from spark_kafkalog.topics_command import CommandError

DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
DEFAULT_METRICS_HOST = "127.0.0.1"
MAX_BROKERS = 16
MAX_PORT = 65535
SHUTDOWN_TIMEOUT_S = 10.0
KILL_DRAIN_S = 0.5
CLUSTER_MARKER = "controller.json"

log = logging.getLogger(__name__)


def parse_listeners(
    text: str, protocol_map: dict[str, SecurityProtocol] | None = None
) -> tuple[Listener, ...]:
    """``NAME://host:port[,...]`` to listeners; :class:`CommandError` naming the bad one."""
    try:
        listeners = listener_list(text, protocol_map or SecurityConfig().protocol_map)
    except ValueError as e:
        raise CommandError(f"--listeners: {e}") from None
    for listener in listeners:
        if listener.port > MAX_PORT:
            raise CommandError(f"--listeners: port {listener.port} is above {MAX_PORT}")
    return listeners


def broker_endpoints(endpoints: Sequence[Listener], index: int) -> tuple[Listener, ...]:
    """Broker ``index``'s listeners: each at ``port + index`` (port 0 stays 0)."""
    shifted = tuple(e.at_port(e.port + index if e.port else 0) for e in endpoints)
    for e in shifted:
        if e.port > MAX_PORT:
            raise CommandError(f"broker {index} would listen on port {e.port} (above {MAX_PORT})")
    return shifted


@dataclass
class _Member:
    """A broker of the served cluster and its server while it runs (None when stopped)."""

    endpoints: tuple[Listener, ...]
    server: BrokerServer | None = None
    metrics: MetricsEndpoint | None = field(default=None, compare=False)


@dataclass(frozen=True)
class MetricsOptions:
    """``--metrics-host`` and ``--metrics-port`` (broker ``i`` on ``port + i``; 0: any)."""

    host: str = DEFAULT_METRICS_HOST
    port: int = 0

    def port_of(self, index: int) -> int:
        port = self.port + index if self.port else 0
        if not 0 <= port <= MAX_PORT:
            raise CommandError(f"--metrics-port: broker {index} would use port {port}")
        return port


class ServedBrokers:
    """The brokers behind their servers: one standalone :class:`Broker`, or the members of an
    :class:`EmbeddedCluster` (module docstring)."""

    def __init__(
        self,
        brokers: Callable[[], dict[int, Broker]],
        endpoints: Sequence[Listener],
        config: BrokerConfig,
        cluster: EmbeddedCluster | None = None,
        security: SecurityConfig | None = None,
        credentials: CredentialStore | None = None,
        authorizer: Authorizer | None = None,
        metrics: MetricsOptions | None = None,
    ) -> None:
        self._brokers = brokers
        self._metrics = metrics
        self._config = config
        self._security = security
        self._credentials = credentials
        self._authorizer = authorizer
        self.cluster = cluster
        self._lock = threading.Lock()
        self._closed = False
        self._members = {i: _Member(broker_endpoints(endpoints, i)) for i in brokers()}
        first = brokers()[min(brokers())]
        self.cluster_id = LogDir(first.log_dir).meta_properties().get("cluster.id", "")

    def nodes(self) -> tuple[Node, ...]:
        """The brokers whose server runs, on the bound port of the listener the request came in
        on (else their first listener)."""
        brokers = self._brokers()
        nodes = []
        for i, m in sorted(self._members.items()):
            if m.server is not None and not brokers[i].is_closed:
                endpoint = m.server.advertised()
                nodes.append(Node(i, endpoint.host, endpoint.port, brokers[i].rack))
        return tuple(nodes)

    def server(self, broker_id: int) -> BrokerServer | None:
        """Broker ``broker_id``'s running server (None while it is stopped)."""
        return self._members[broker_id].server

    def start_all(self) -> list[str]:
        with self._lock:
            lines = [line for i in sorted(self._members) for line in self._serve(i)]
            return lines + [self._expose(i) for i in sorted(self._members) if self._metrics]

    def _expose(self, broker_id: int) -> str:
        """Start broker ``broker_id``'s metrics endpoint (kept until :meth:`shutdown`)."""
        assert self._metrics is not None
        member = self._members[broker_id]
        try:
            endpoint = MetricsEndpoint(self._metrics.host, self._metrics.port_of(broker_id))
        except OSError as e:
            raise CommandError(f"--metrics-port: broker {broker_id} cannot listen: {e}") from None
        endpoint.register(KafkaCollector(lambda: member.server, lambda: self._brokers()[broker_id]))
        member.metrics = endpoint
        return f"broker {broker_id} metrics on {endpoint.url}"

    def _serve(self, broker_id: int) -> list[str]:
        """Start broker ``broker_id``'s server; its listener lines. A port the OS picked is
        kept for a restart, so clients' bootstrap lists stay valid."""
        member = self._members[broker_id]
        broker = self._brokers()[broker_id]
        ctx = ApiContext(broker, self.nodes, self.cluster_id, self._authorizer)
        if self._metrics is not None:
            enable_topic_stats(broker)
        server = BrokerServer(
            self._config,
            member.endpoints,
            lambda a: register_all(a, ctx),
            self._security,
            self._credentials,
            self._authorizer,
            request_metrics=self._metrics is not None,
        )
        member.server = server.start()
        member.endpoints = tuple(server.listeners)
        return [f"broker {broker_id} listening on {listener}" for listener in server.listeners]

    def control(self, line: str) -> str:
        """One control command (module docstring): its answer line."""
        words = line.split()
        if not words:
            return ""
        if self.cluster is None:
            return "error: control commands need --brokers 2 or more"
        if len(words) != 2 or words[0] not in ("stop", "kill", "start") or not words[1].isdigit():
            return f"error: {line.strip()!r} is not 'stop ID', 'kill ID' or 'start ID'"
        command, broker_id = words[0], int(words[1])
        if broker_id not in self._members:
            return f"error: no broker {broker_id} (brokers 0..{len(self._members) - 1})"
        with self._lock:
            if self._closed:
                return "error: the server is shutting down"
            return self._control(command, broker_id)

    def _control(self, command: str, broker_id: int) -> str:
        assert self.cluster is not None
        member = self._members[broker_id]
        if command == "start":
            if member.server is not None:
                return f"error: broker {broker_id} is running"
            self.cluster.restart_broker(broker_id)
            return "; ".join(self._serve(broker_id))
        if member.server is None:
            return f"error: broker {broker_id} is stopped"
        server, member.server = member.server, None
        # the network goes first either way, so no request reaches a stopped broker
        server.shutdown(SHUTDOWN_TIMEOUT_S if command == "stop" else KILL_DRAIN_S)
        self.cluster.stop_broker(broker_id, clean=command == "stop")
        return f"broker {broker_id} {'stopped' if command == 'stop' else 'killed'}"

    def shutdown(self) -> None:
        """Every running server drained and stopped, then every broker closed (flushed)."""
        with self._lock:
            self._closed = True
            for member in self._members.values():
                if member.metrics is not None:
                    member.metrics.close()
                    member.metrics = None
                if member.server is not None:
                    member.server.shutdown(SHUTDOWN_TIMEOUT_S)
                    member.server = None
            self._close_brokers()

    def _close_brokers(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        else:
            for broker in self._brokers().values():
                broker.close()


def load_security(path: Path | None) -> SecurityConfig:
    """The ``[security]`` table of the broker config file (defaults without a file)."""
    if path is None:
        return SecurityConfig()
    table = read_toml(Path(path), "broker config file").get("security", {})
    return SecurityConfig.from_mapping(table, str(path))


def open_brokers(
    log_dir: Path,
    config: BrokerConfig,
    brokers: int,
    endpoints,
    security: SecurityConfig | None = None,
    metrics: MetricsOptions | None = None,
) -> ServedBrokers:
    """Open the log dir(s) (creating them) and wrap them, servers not started yet; SASL
    listeners authenticate against ``log_dir``'s credentials."""
    credentials = CredentialStore(log_dir)
    authorizer = authorizer_for(security or SecurityConfig(), log_dir)  # the ACLs: log_dir's
    if not 1 <= brokers <= MAX_BROKERS:
        raise CommandError(f"--brokers must be 1..{MAX_BROKERS}, not {brokers}")
    cluster_layout = (log_dir / CLUSTER_MARKER).exists()
    if brokers == 1:
        if cluster_layout:
            raise CommandError(
                f"{log_dir} holds a cluster of brokers ({CLUSTER_MARKER}): serve it with "
                "--brokers N as before"
            )
        # partitions registered without a log (a stop mid-creation) are made once it listens
        broker = Broker(log_dir, config=config, create=True, complete_in_background=True)
        return ServedBrokers(
            lambda: {broker.broker_id: broker},
            endpoints,
            config,
            None,
            security,
            credentials,
            authorizer,
            metrics,
        )
    if (log_dir / "meta.properties").exists():
        raise CommandError(
            f"{log_dir} is the log dir of one broker: serve it without --brokers, or give "
            "--brokers N a directory of its own"
        )
    cluster = EmbeddedCluster(log_dir, brokers, config=config)
    return ServedBrokers(
        lambda: cluster.brokers,
        endpoints,
        config,
        cluster,
        security,
        credentials,
        authorizer,
        metrics,
    )


def run(
    log_dir: Path,
    config: BrokerConfig,
    listeners: str,
    brokers: int,
    out: TextIO,
    control_in: TextIO | None = None,
    security: SecurityConfig | None = None,
    metrics: MetricsOptions | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT (call from the main thread); 0 after a clean shutdown.
    ``metrics``: the Prometheus endpoints' address (None: off)."""
    if not logging.getLogger().handlers:  # called without the command line's setup
        cli_logging.configure("info")
    security = security or SecurityConfig()
    endpoints = parse_listeners(listeners, security.protocol_map)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        served = open_brokers(log_dir, config, brokers, endpoints, security, metrics)
        try:
            _say(out, served.start_all())
            if served.cluster is not None and control_in is not None:
                _start_control(served, control_in, out, stop)
            while not stop.wait(1.0):
                pass
            log.info("shutting down")
        finally:
            served.shutdown()
        _say(out, ["stopped"])
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(out: TextIO, lines: list[str]) -> None:
    out.write("".join(line + "\n" for line in lines))
    out.flush()


def _start_control(served: ServedBrokers, control_in: TextIO, out: TextIO, stop) -> None:
    """A daemon thread answering control commands from ``control_in`` until its end."""

    def loop() -> None:
        for line in control_in:
            if stop.is_set():
                return
            try:
                answer = served.control(line)
            except Exception as e:  # a broker that fails to stop or start: say so, go on
                answer = f"error: {line.strip()}: {type(e).__name__}: {e}"
            if answer:
                _say(out, [answer])

    threading.Thread(target=loop, name="kafkalog-serve-control", daemon=True).start()
