"""One connection's SASL exchange (Kafka's ``SaslServerAuthenticator``), as a state machine over
the tokens; the network layer frames them (SaslHandshake / SaslAuthenticate, or raw tokens after
a v0 handshake).

States: ``HANDSHAKE`` (ApiVersions and SaslHandshake allowed) -> ``AUTHENTICATE`` (the chosen
mechanism's tokens) -> ``COMPLETE`` (a principal) or ``FAILED``. Mechanisms:

- ``PLAIN`` (RFC 4616): one token ``[authzid] NUL authcid NUL password``; the authzid must be
  empty or the authcid, as Kafka requires; the password is checked against the user's stored
  SCRAM credential (``scram_credentials``).
- ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802 / 7677), through ``scramp``'s server:
  client-first -> server-first, client-final -> server-final. An unknown user fails at the
  client-first with the same message as a wrong proof (no user enumeration).

Any failure raises :class:`SaslAuthenticationError` with Kafka's message; the caller answers
SASL_AUTHENTICATION_FAILED (58), waits ``connection.failed.authentication.delay.ms`` (or what the
authentication limiter says) and closes. ``admit``, when given, is asked about each user named
(PLAIN's authcid, SCRAM's client-first user, before its credential is looked up): an
:class:`AuthenticationLimitedError` fails the exchange with its message (kept in ``refused``).
``user`` is the user the client named ("" before one was parsed).
A token longer than ``max_token`` fails too (``sasl.server.max.receive.size``).

Not thread-safe: a connection's processor thread alone drives it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import scramp

from broker_embedded.errors import SaslAuthenticationError
from broker_embedded.server.security.authentication_limiter import AuthenticationLimitedError
from broker_embedded.server.security.kafka_principal import KafkaPrincipal
from broker_embedded.server.security.scram_credentials import HASHES, CredentialStore


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class SaslAuthenticator:
    """The SASL state of one connection (module docstring)."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        store: CredentialStore,
        max_token: int,
        admit: Callable[[str], None] | None = None,
    ) -> None:
        self.mechanisms = mechanisms
        self._store = store
        self._max_token = max_token
        self._admit = admit
        self.user = ""  # the user the client named
        self.refused = ""  # the limiter's refusal of the user or address, if it refused
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self._scram: scramp.core.ScramServer | None = None
        self._user = ""  # the SCRAM client-first's user, once looked up

    def handshake(self, mechanism: str) -> bool:
        """SaslHandshake: False (and FAILED) when ``mechanism`` is not enabled."""
        if self.state is not SaslState.HANDSHAKE or mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            return False
        self.mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        return True

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to one client token; :class:`SaslAuthenticationError` on failure
        (the state is then FAILED)."""
        if self.state is not SaslState.AUTHENTICATE:
            state, self.state = self.state, SaslState.FAILED
            raise SaslAuthenticationError(
                f"unexpected SASL token in state {state.value} (SaslHandshake first)"
            )
        try:
            if len(token) > self._max_token:
                raise SaslAuthenticationError(
                    f"SASL token of {len(token)} bytes exceeds sasl.server.max.receive.size="
                    f"{self._max_token}"
                )
            return self._plain(token) if self.mechanism == "PLAIN" else self._scram_step(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        except Exception:  # a malformed token, a wrong proof, an unknown user: one answer
            self.state = SaslState.FAILED  # (scramp wraps what its user lookup raised)
            raise SaslAuthenticationError(self.refused or self._invalid()) from None

    def _invalid(self) -> str:
        if self.mechanism == "PLAIN":
            return "Authentication failed: Invalid username or password"
        return (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self.mechanism}"
        )

    def _plain(self, token: bytes) -> bytes:
        authzid, user, password = token.decode("utf-8").split("\0")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._named(user)
        creds = self._store.users().get(user, {})
        mechanism = next((m for m in HASHES if m in creds), None)  # SHA-256 first
        if mechanism is None or not creds[mechanism].matches(mechanism, password):
            raise SaslAuthenticationError(self._invalid())
        self._complete(user)
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        if self._scram is None:
            assert self.mechanism is not None
            self._scram = scramp.ScramMechanism(self.mechanism).make_server(self._auth_info)
            self._scram.set_client_first(token.decode("utf-8"))
            return self._scram.get_server_first().encode()
        self._scram.set_client_final(token.decode("utf-8"))
        final = self._scram.get_server_final()
        self._complete(self._user)
        return final.encode()

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        assert self.mechanism is not None
        self._named(user)
        credential = self._store.credential(user, self.mechanism)
        if credential is None:
            raise SaslAuthenticationError(self._invalid())
        self._user = user
        c = credential
        return c.salt, c.stored_key, c.server_key, c.iterations

    def _named(self, user: str) -> None:
        """The client named ``user``: the limiter may refuse it (or the client's address)."""
        self.user = user
        if self._admit is None:
            return
        try:
            self._admit(user)
        except AuthenticationLimitedError as e:
            self.refused = str(e)
            raise SaslAuthenticationError(self.refused) from None

    def _complete(self, user: str) -> None:
        self.principal = KafkaPrincipal.user(user)
        self.state = SaslState.COMPLETE
