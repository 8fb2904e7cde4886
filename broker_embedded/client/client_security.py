"""The wire client's security settings, from Kafka's client property names, and the SASL
exchange it runs on each new connection.

Properties (those of Kafka's clients and librdkafka; values are strings):

    security.protocol                     PLAINTEXT (default) | SSL | SASL_PLAINTEXT | SASL_SSL
    ssl.truststore.location / ssl.ca.location      PEM file of the CAs to trust (default: the
                                          system's); ssl.truststore.type must be PEM
    ssl.truststore.certificates           the same as inline PEM
    ssl.keystore.location                 PEM file with the client's key and certificate chain
    ssl.certificate.location + ssl.key.location    or the two as separate PEM files (librdkafka)
    ssl.key.password / ssl.keystore.password       the key's password, if encrypted
    ssl.endpoint.identification.algorithm "https" (default: the broker's certificate must name
                                          the host connected to) or "" (not checked)
    sasl.mechanism                        PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (Kafka's default,
                                          GSSAPI, is refused with a message)
    sasl.jaas.config                      ``org.apache.kafka.common.security.plain.PlainLoginModule
                                          required username="u" password="p";`` (or
                                          ``...scram.ScramLoginModule``): username and password
    sasl.username / sasl.password         or the two directly (librdkafka's names)

Unknown ``ssl.*`` / ``sasl.*`` properties are refused (:class:`ValueError` naming the property),
so a misspelt setting never silently leaves a connection unencrypted.

The exchange (:func:`authenticate`), after TLS and ApiVersions, as Kafka's clients do:
SaslHandshake v1 (mechanism), then SaslAuthenticate v0-2 tokens: PLAIN sends
``NUL user NUL password`` once; SCRAM (``scramp``'s client, RFC 5802/7677) sends client-first
and client-final and checks the server's signature. A refusal raises
:class:`SaslAuthenticationError` with the broker's message.

Immutable values: thread-safe. :func:`authenticate` runs on one connection's thread.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import scramp

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import SaslAuthenticationError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_SSL_KEYS = {
    "ssl.truststore.location": "cafile",
    "ssl.ca.location": "cafile",
    "ssl.truststore.certificates": "cadata",
    "ssl.keystore.location": "certfile",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "key_password",
    "ssl.keystore.password": "key_password",
}
_IGNORED = frozenset(("ssl.truststore.type", "ssl.keystore.type", "ssl.protocol"))
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How the client connects (module docstring); the default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    cafile: str | None = None
    cadata: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    mechanism: str = "GSSAPI"
    username: str | None = None
    password: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        """From Kafka's client properties (module docstring); ValueError naming a bad one."""
        values: dict[str, Any] = {}
        for key, value in properties.items():
            values.update(_property(key.strip().lower(), str(value)))
        security = cls(**values)
        security.check()
        return security

    def check(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol={self.protocol!r} is not one of {PROTOCOLS}")
        if not self.uses_sasl:
            return
        if self.mechanism not in MECHANISMS:
            raise ValueError(
                f"sasl.mechanism={self.mechanism!r} is not supported (one of "
                f"{', '.join(MECHANISMS)})"
            )
        if not self.username or self.password is None:
            raise ValueError(
                f"{self.protocol} needs a username and password (sasl.jaas.config, or "
                "sasl.username and sasl.password)"
            )

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context (system CAs unless a truststore is given)."""
        context = ssl.create_default_context(cafile=self.cafile, cadata=self.cadata)
        context.check_hostname = self.check_hostname
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile, self.key_password)
        return context


def _property(key: str, value: str) -> dict[str, Any]:
    if key == "security.protocol":
        return {"protocol": value.strip().upper()}
    if key in _SSL_KEYS:
        return {_SSL_KEYS[key]: value}
    if key == "ssl.endpoint.identification.algorithm":
        return {"check_hostname": value.strip().lower() == "https"}
    if key in _IGNORED:
        if value.strip().upper() not in ("PEM", "TLS", "TLSV1.2", "TLSV1.3"):
            raise ValueError(f"{key}={value!r} is not supported (PEM files and TLS only)")
        return {}
    if key == "sasl.mechanism":
        return {"mechanism": value.strip().upper()}
    if key == "sasl.username":
        return {"username": value}
    if key == "sasl.password":
        return {"password": value}
    if key == "sasl.jaas.config":
        return parse_jaas(value)
    raise ValueError(f"client property {key} is not supported")


def parse_jaas(text: str) -> dict[str, str]:
    """``username`` and ``password`` of a JAAS ``LoginModule required k="v" ...;`` entry."""
    if not re.match(r"\s*[\w.$]+\s+(required|requisite|sufficient|optional)\b", text):
        raise ValueError(
            'sasl.jaas.config is not \'<LoginModule class> required username="..." '
            'password="...";\''
        )
    found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(text)}
    return {k: found[k] for k in ("username", "password") if k in found}


Send = Callable[..., Any]


def authenticate(send: Send, security: ClientSecurity, broker: str) -> None:
    """Run the SASL exchange over ``send(api_key, version, **values) -> response``."""
    handshake = send(SASL_HANDSHAKE, 1, mechanism=security.mechanism)
    if handshake.error_code != ErrorCode.none:
        error = SaslAuthenticationError(
            f"broker {broker} does not enable SASL mechanism {security.mechanism} (it enables "
            f"{', '.join(handshake.mechanisms)})"
        )
        error.code = int(handshake.error_code)
        raise error
    assert security.username is not None and security.password is not None
    if security.mechanism == "PLAIN":
        _token(send, f"\0{security.username}\0{security.password}".encode(), broker)
        return
    client = scramp.ScramClient([security.mechanism], security.username, security.password)
    first = _token(send, client.get_client_first().encode(), broker)
    client.set_server_first(first.decode())
    final = _token(send, client.get_client_final().encode(), broker)
    try:
        client.set_server_final(final.decode())
    except scramp.ScramException as e:
        raise SaslAuthenticationError(f"broker {broker}: bad SCRAM server signature: {e}") from None


def _token(send: Send, token: bytes, broker: str) -> bytes:
    response = send(SASL_AUTHENTICATE, 2, auth_bytes=token)
    if response.error_code != ErrorCode.none:
        raise SaslAuthenticationError(
            f"authentication with broker {broker} failed: {response.error_message}"
        )
    return response.auth_bytes
