"""Listeners and their security settings, with Kafka's config names.

``listeners`` is ``NAME://host:port[,...]`` (port 0: the OS picks one). Each listener name maps
to a security protocol through ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``), whose
default maps the four protocol names to themselves, as Kafka's does: ``SASL_SSL://h:9094``
needs no map, ``EXTERNAL://h:9094`` needs ``EXTERNAL:SASL_SSL``.

The ``[security]`` table of the broker config file (``conf/broker.toml``), every key optional:

    "listener.security.protocol.map" = "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"
    "ssl.keystore.type" = "PEM"                 the only type (Java key stores are Java's)
    "ssl.keystore.location" = "/path/server.pem"  PEM: the private key and certificate chain
    "ssl.keystore.certificate.chain" = "-----BEGIN CERTIFICATE-----..."  or inline PEM, with
    "ssl.keystore.key" = "-----BEGIN PRIVATE KEY-----..."                 its key
    "ssl.key.password" = ""                     the key's password, if it is encrypted
    "ssl.truststore.type" = "PEM"
    "ssl.truststore.location" = "/path/ca.pem"  CAs that sign client certificates (or inline:
    "ssl.truststore.certificates" = "..."       PEM certificates)
    "ssl.client.auth" = "none"                  required | requested | none
    "sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    "connection.failed.authentication.delay.ms" = 100   a failed authentication's answer waits
                                                this long before the connection closes
    "sasl.server.max.receive.size" = 524288     a larger frame before authentication closes
                                                the connection
    "authentication.timeout.ms" = 10000         a connection not authenticated (TLS handshake
                                                and SASL exchange) within this is closed; not a
                                                Kafka key (Kafka leaves it to the idle timeout)
    "authentication.failure.limit.per.principal" = 10   kafkalog's own, not Kafka keys (security/
    "authentication.failure.limit.per.host" = 100       authentication_limiter.py): this many
    "authentication.failure.window.ms" = 60000          failed authentications of a principal,
    "authentication.lockout.ms" = 300000                or from an address, within the window
    "authentication.failure.max.delay.ms" = 5000        lock it out (0: never); the delay after
                                                a failure doubles with each, up to the max
    "authorizer.class.name" = ""                authorization: off when empty (every request
                                                allowed, as Kafka without an authorizer); on with
                                                Kafka's kafka.security.authorizer.AclAuthorizer or
                                                org.apache.kafka.metadata.authorizer.
                                                StandardAuthorizer (both: security/authorizer.py)
    "super.users" = "User:admin;User:ops"       principals allowed everything (``;``-separated)
    "allow.everyone.if.no.acl.found" = false    a resource without any ACL is open to everyone

An unknown key or a bad value is an :class:`InvalidConfigError` naming the key and source.
Immutable: thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from broker_embedded.storage.log_config import InvalidConfigError


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


_PROTOCOL_NAMES = frozenset(p.value for p in SecurityProtocol)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("required", "requested", "none")
AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


@dataclass(frozen=True, slots=True)
class Listener:
    """A listener: its name, security protocol and address (port 0: the OS picks one)."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"

    def at_port(self, port: int) -> Listener:
        return Listener(self.name, self.protocol, self.host, port)


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` over Kafka's default (each protocol name maps to itself)."""
    mapping = {p.value: p for p in SecurityProtocol}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, colon, protocol = item.partition(":")
        if not colon or protocol.strip().upper() not in _PROTOCOL_NAMES:
            raise ValueError(
                f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL with a "
                f"protocol of {', '.join(p.value for p in SecurityProtocol)}"
            )
        mapping[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
    return mapping


def parse_listener(text: str, protocol_map: Mapping[str, SecurityProtocol]) -> Listener:
    """``NAME://host:port``; ValueError naming what is wrong."""
    name, sep, rest = text.strip().partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ValueError(f"listener {text!r} is not NAME://host:port")
    protocol = protocol_map.get(name.upper())
    if protocol is None:
        raise ValueError(
            f"listener {text!r}: {name} is not in listener.security.protocol.map "
            f"({', '.join(sorted(protocol_map))})"
        )
    return Listener(name.upper(), protocol, host.strip("[]"), int(port))


def parse_listeners(
    text: str, protocol_map: Mapping[str, SecurityProtocol]
) -> tuple[Listener, ...]:
    """Comma-separated listeners; two with one name are refused (as Kafka refuses them)."""
    listeners = tuple(parse_listener(item, protocol_map) for item in text.split(","))
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ValueError(f"listeners {text!r} name a listener twice")
    return listeners


@dataclass(frozen=True)
class SecurityConfig:
    """The ``[security]`` table (module docstring); attribute names mirror Kafka's keys."""

    listener_security_protocol_map: str = ""
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str = ""
    ssl_keystore_certificate_chain: str = ""
    ssl_keystore_key: str = ""
    ssl_key_password: str = ""
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str = ""
    ssl_truststore_certificates: str = ""
    ssl_client_auth: str = "none"
    sasl_enabled_mechanisms: str = ",".join(SASL_MECHANISMS)
    connection_failed_authentication_delay_ms: int = 100
    sasl_server_max_receive_size: int = 524_288
    authentication_timeout_ms: int = 10_000
    authentication_failure_limit_per_principal: int = 10
    authentication_failure_limit_per_host: int = 100
    authentication_failure_window_ms: int = 60_000
    authentication_lockout_ms: int = 300_000
    authentication_failure_max_delay_ms: int = 5_000
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        for key in ("ssl_keystore_type", "ssl_truststore_type"):
            if getattr(self, key).upper() != "PEM":
                raise InvalidConfigError(f"{_key(key)} must be PEM, not {getattr(self, key)!r}")
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise InvalidConfigError(
                f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, not "
                f"{self.ssl_client_auth!r}"
            )
        if self.authorizer_class_name not in ("", *AUTHORIZERS):
            raise InvalidConfigError(
                f"authorizer.class.name must be empty (no authorization) or one of "
                f"{', '.join(AUTHORIZERS)}, not {self.authorizer_class_name!r}"
            )
        unknown = set(self.mechanisms) - set(SASL_MECHANISMS)
        if unknown or not self.mechanisms:
            raise InvalidConfigError(
                f"sasl.enabled.mechanisms {self.sasl_enabled_mechanisms!r}: each must be one of "
                f"{', '.join(SASL_MECHANISMS)}"
            )
        try:
            parse_protocol_map(self.listener_security_protocol_map)
        except ValueError as e:
            raise InvalidConfigError(str(e)) from None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The enabled SASL mechanisms, in the configured order."""
        return tuple(
            m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",") if m.strip()
        )

    @property
    def authorizes(self) -> bool:
        """Is authorization on (``authorizer.class.name`` set)?"""
        return bool(self.authorizer_class_name)

    @property
    def protocol_map(self) -> dict[str, SecurityProtocol]:
        return parse_protocol_map(self.listener_security_protocol_map)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str) -> SecurityConfig:
        """From the ``[security]`` table; unknown keys and wrongly typed values are refused."""
        known = {_key(f.name): f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            f = known.get(key)
            if f is None:
                raise InvalidConfigError(
                    f"{source}: unknown security config {key!r} (known: {', '.join(known)})"
                )
            want = {"int": int, "bool": bool}.get(str(f.type), str)
            if (
                isinstance(value, bool) != (want is bool)
                or not isinstance(value, want)
                or (want is int and value < 0)
            ):
                kind = {int: "an integer >= 0", bool: "true or false"}.get(want, "a string")
                raise InvalidConfigError(
                    f"{source}: invalid value {value!r} for security config {key}: must be {kind}"
                )
            values[f.name] = value
        try:
            return cls(**values)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{source}: [security]: {e}") from None


def _key(attribute: str) -> str:
    return attribute.replace("_", ".")
