"""The request path assembled (Kafka's ``BrokerServer``, its network half): a
:class:`SocketServer`, the :class:`KafkaApis` dispatcher and the request handler pool.

    server = BrokerServer(config, ["PLAINTEXT://127.0.0.1:0"], register_apis)
    server.start(); server.endpoints  # the bound ports
    ...
    server.shutdown(timeout=10)

``register_apis(apis)`` is the seam for the API layer: it registers each API's handler and
version range on the :class:`KafkaApis` (ApiVersions is built in, and SaslHandshake and
SaslAuthenticate when a listener uses SASL: a PLAINTEXT/SSL-only server does not advertise them,
so its ApiVersions table is what it was; AlterUserScramCredentials and
DescribeUserScramCredentials when the server has a credential store). ``security`` (the
``[security]`` config) and ``credentials`` (the users' SCRAM store) secure the listeners
(``security/``); ``authorizer`` (``security/authorizer.py``; None: authorization off, the APIs
below not served) serves CreateAcls, DescribeAcls and DeleteAcls (``security/acl_apis.py``);
the handlers ask the same authorizer through their ``ApiContext``. A credentials or ACL file
that cannot be read or parsed fails the construction (``SecurityFileError`` naming the file).
``request_metrics``: the processors time every request (request_metrics.py;
``metrics_endpoint`` reads them).
:meth:`BrokerServer.advertised` is the endpoint of a listener by name, the one Metadata names
for a request that came in on it.

Shutdown, each step bounded by what is left of ``timeout``: stop accepting; stop the admin
queue (half the time at most: its waiting requests' connections are closed, the background
creation of answered topics' logs stops after its current step, the next start makes the
rest, see admin_queue.py); stop reading requests and let the
in-flight ones be answered (half the time at most); stop the handler
threads (requests still queued get their connections closed); stop what the handlers
registered with ``KafkaApis.on_shutdown`` (the group coordinator's timers); close every
connection.
``shutdown`` returns within about ``timeout`` seconds even if a handler is stuck (the threads
are daemons; a stuck one is logged). Thread safety: start and shutdown from one owner thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.api_version_manager import ApiVersionManager
from broker_embedded.server.endpoint import Endpoint
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.kafka_request_handler import KafkaRequestHandlerPool, current_listener
from broker_embedded.server.request_metrics import RequestMetrics
from broker_embedded.server.security.acl_apis import register_acl_apis
from broker_embedded.server.security.authorizer import Authorizer
from broker_embedded.server.security.listener_security import register_sasl_apis
from broker_embedded.server.security.scram_admin import register_scram_apis
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import Listener, SecurityConfig
from broker_embedded.server.socket_server import SocketServer


class BrokerServer:
    """Socket server, API dispatcher and handler threads, started and stopped together."""

    def __init__(
        self,
        config: BrokerConfig,
        listeners: Sequence[Endpoint | Listener | str],
        register_apis: Callable[[KafkaApis], None] | None = None,
        security: SecurityConfig | None = None,
        credentials: CredentialStore | None = None,
        authorizer: Authorizer | None = None,
        request_metrics: bool = False,
    ) -> None:
        self.versions = ApiVersionManager()
        self.socket_server = SocketServer(config, self.versions, listeners, security, credentials)
        if request_metrics:  # each processor times its requests (request_metrics.py)
            for processor in self.socket_server.processors:
                processor.metrics = RequestMetrics()
        self.started_ns = time.monotonic_ns()
        self.apis = KafkaApis(self.socket_server.request_channel, self.versions)
        if any(listener.protocol.uses_sasl for listener in self.listeners):
            register_sasl_apis(self.apis)
        if credentials is not None:
            credentials.users()  # read now: a broken file fails the start, naming it
            register_scram_apis(self.apis, credentials, authorizer)
        if authorizer is not None:
            register_acl_apis(self.apis, authorizer)
        if register_apis is not None:
            register_apis(self.apis)
        self.handlers = KafkaRequestHandlerPool(
            self.socket_server.request_channel, self.apis, config.num_io_threads
        )
        self._started = False

    @property
    def endpoints(self) -> list[Endpoint]:
        return self.socket_server.endpoints

    @property
    def listeners(self) -> list[Listener]:
        return self.socket_server.listeners

    def advertised(self, listener: str | None = None) -> Endpoint:
        """The bound endpoint of the listener named ``listener`` (default: the listener of the
        request this thread handles), the first listener when there is none of that name."""
        name = current_listener() if listener is None else listener
        for bound, endpoint in zip(self.listeners, self.endpoints, strict=True):
            if bound.name == name:
                return endpoint
        return self.endpoints[0]

    def start(self) -> BrokerServer:
        self.handlers.start()
        self.socket_server.start()
        self._started = True
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        if self._started:
            self.socket_server.stop_accepting(left())
            self.apis.stop_admin(left() / 2)
            self.socket_server.drain(left() / 2)
            self.handlers.shutdown(left())
        self.apis.shutdown()
        self.socket_server.shutdown(left())
        self._started = False

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
