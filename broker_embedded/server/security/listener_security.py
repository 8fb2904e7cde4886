"""What a processor needs to secure one listener's connections, built once per server:
the listener, its TLS context (SSL, SASL_SSL), the SASL mechanisms and credential store (SASL
listeners), the limits of the ``[security]`` config, and the server's one
:class:`AuthenticationLimiter` (shared by its listeners), which says how long each failed or
successful authentication's answer waits and which principals and addresses are locked out.

Also the answers of the SASL exchange (kio's SaslHandshake and SaslAuthenticate responses),
which the network layer sends itself: those two APIs reach a handler only on a connection that
is not in a SASL exchange (a PLAINTEXT listener, or after authentication), where the handler
answers ILLEGAL_SASL_STATE (34), as Kafka's ``KafkaApis`` does.

Immutable after construction (``SSLContext`` is shared read-only): thread-safe.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from broker_embedded.error_code import ErrorCode
from broker_embedded.server.protocol import response_schema
from broker_embedded.server.security.authentication_limiter import AuthenticationLimiter
from broker_embedded.server.security.sasl_authenticator import SaslAuthenticator
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import Listener, SecurityConfig
from broker_embedded.server.security.ssl_context import server_context

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
SASL_HANDSHAKE_RANGE = (0, 1)
SASL_AUTHENTICATE_RANGE = (0, 2)


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener's security (module docstring)."""

    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    credentials: CredentialStore | None = None
    max_token: int = 524_288
    failed_delay_s: float = 0.1
    auth_timeout_s: float = 10.0
    limiter: AuthenticationLimiter | None = None  # None: Kafka's fixed delay

    @classmethod
    def of(
        cls,
        listener: Listener,
        config: SecurityConfig,
        credentials: CredentialStore | None,
        tls: ssl.SSLContext | None = None,
        limiter: AuthenticationLimiter | None = None,
    ) -> ListenerSecurity:
        """``tls``: the server's context when one is built already (one per server);
        ``limiter``: the server's failed-authentication limits."""
        protocol = listener.protocol
        if protocol.uses_sasl and credentials is None:
            raise ValueError(f"listener {listener} uses SASL but the server has no credentials")
        return cls(
            listener,
            (tls or server_context(config)) if protocol.uses_tls else None,
            config.mechanisms if protocol.uses_sasl else (),
            credentials if protocol.uses_sasl else None,
            config.sasl_server_max_receive_size,
            config.connection_failed_authentication_delay_ms / 1000,
            config.authentication_timeout_ms / 1000,
            limiter,
        )

    def authenticator(self, host: str = "") -> SaslAuthenticator | None:
        """A new connection's SASL state (None on a listener without SASL); ``host``: the
        client's address, which the limiter may have locked out."""
        if self.credentials is None:
            return None
        limiter = self.limiter
        admit = None if limiter is None else (lambda user: limiter.admit(user, host))
        return SaslAuthenticator(self.mechanisms, self.credentials, self.max_token, admit)

    def failed(self, sasl: SaslAuthenticator, host: str) -> float:
        """Seconds the answer to a failed authentication waits (counted by the limiter)."""
        if self.limiter is None:
            return self.failed_delay_s
        return self.limiter.failed(sasl.user, host, bool(sasl.refused))

    def succeeded(self, sasl: SaslAuthenticator) -> float:
        """Seconds the answer to a successful authentication waits (0 but under guessing)."""
        return 0.0 if self.limiter is None else self.limiter.succeeded(sasl.user)


def sasl_handshake_response(version: int, error: ErrorCode, mechanisms: tuple[str, ...]) -> Any:
    return _schema(SASL_HANDSHAKE_KEY, version)(error_code=error, mechanisms=mechanisms)


def sasl_authenticate_response(
    version: int, error: ErrorCode, message: str | None, token: bytes
) -> Any:
    values: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": token}
    if version >= 1:
        values["session_lifetime"] = timedelta(0)
    return _schema(SASL_AUTHENTICATE_KEY, version)(**values)


def _schema(api_key: int, version: int) -> Any:
    schema = response_schema(api_key, version)
    assert schema is not None
    return schema


def register_sasl_apis(apis: Any) -> None:
    """Advertise SaslHandshake v0-1 and SaslAuthenticate v0-2 on a :class:`KafkaApis`. The
    network layer answers them during a SASL exchange; a request that reaches a handler is
    outside one: ILLEGAL_SASL_STATE (34), as Kafka's ``KafkaApis`` answers."""

    def handshake(request: Any) -> Any:
        return sasl_handshake_response(request.header.api_version, ErrorCode.illegal_sasl_state, ())

    def authenticate(request: Any) -> Any:
        message = "SaslAuthenticate request received after successful authentication"  # Kafka's
        return sasl_authenticate_response(
            request.header.api_version, ErrorCode.illegal_sasl_state, message, b""
        )

    apis.register_responder(SASL_HANDSHAKE_KEY, *SASL_HANDSHAKE_RANGE, handshake)
    apis.register_responder(SASL_AUTHENTICATE_KEY, *SASL_AUTHENTICATE_RANGE, authenticate)
