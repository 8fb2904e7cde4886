"""Test certificates made in the test session with ``cryptography``: a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, as PEM files in a tmp dir; and a
broker served on the four kinds of listeners with a SCRAM user (``secured``)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from broker_embedded.server.security.scram_credentials import CredentialStore, ScramCredential
from broker_embedded.server.security.security_config import SecurityConfig
from tests.broker_embedded.server._net import config

USER, PASSWORD = "alice", "alice-secret"
LISTENERS = [
    "PLAINTEXT://127.0.0.1:0",
    "SSL://127.0.0.1:0",
    "SASL_PLAINTEXT://127.0.0.1:0",
    "SASL_SSL://127.0.0.1:0",
]
DELAY_MS = 300
CLIENT_SUBJECT = "CN=alice,OU=eng,O=example,C=US"  # as Kafka's principal builder writes it


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (PEM)
    server: Path  # the server's key and certificate chain (PEM), Kafka's PEM keystore file
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(**attrs: str) -> x509.Name:
    oids = {
        "C": NameOID.COUNTRY_NAME,
        "O": NameOID.ORGANIZATION_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "CN": NameOID.COMMON_NAME,
    }
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


def _cert(subject, issuer, key, signer, ca: bool, san: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_pki(directory: Path) -> Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(O="kafkalog-test", CN="kafkalog test CA")
    ca = _cert(ca_name, ca_name, ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = _cert(_name(CN="localhost"), ca_name, server_key, ca_key, ca=False, san=san)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(
        _name(C="US", O="example", OU="eng", CN="alice"), ca_name, client_key, ca_key, ca=False
    )
    pem = serialization.Encoding.PEM
    files = {
        "ca.pem": ca.public_bytes(pem),
        "server.pem": _pem_key(server_key) + server.public_bytes(pem),
        "server-cert.pem": server.public_bytes(pem),
        "server-key.pem": _pem_key(server_key),
        "client-cert.pem": client.public_bytes(pem),
        "client-key.pem": _pem_key(client_key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    d = directory
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        d / "server-cert.pem",
        d / "server-key.pem",
        d / "client-cert.pem",
        d / "client-key.pem",
    )


def security(pki: Pki, **overrides: object) -> SecurityConfig:
    """The server's [security]: the PEM keystore, client certificates requested."""
    values: dict = {
        "ssl_keystore_location": str(pki.server),
        "ssl_truststore_location": str(pki.ca),
        "ssl_client_auth": "requested",
        "connection_failed_authentication_delay_ms": DELAY_MS,
        **overrides,
    }
    return SecurityConfig(**values)


def add_user(log_dir: Path, user: str = USER, password: str = PASSWORD) -> None:
    """A SCRAM-SHA-256 and -512 user in the log dir's credentials."""
    store = CredentialStore(log_dir)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.upsert(user, mechanism, ScramCredential.from_password(mechanism, password))


@contextlib.contextmanager
def secured(log_dir: Path, sec: SecurityConfig, listeners=LISTENERS) -> Iterator[BrokerServer]:
    """A started server over a new broker with :data:`USER`; both closed on exit."""
    broker = Broker(log_dir, create=True, config=config())
    add_user(log_dir)
    server = broker_server(broker, listeners, security=sec).start()
    try:
        yield server
    finally:
        server.shutdown(5.0)
        broker.close()


def port(server: BrokerServer, name: str) -> int:
    """The bound port of the server's listener ``name``."""
    return next(li.port for li in server.listeners if li.name == name)


@pytest.fixture(scope="module", name="pki")
def pki_fixture(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The module's certificates (import it into a test module to use ``pki``)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", name="server")
def server_fixture(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    """One secured server for the module: the four listeners, client certificates requested,
    failed authentications as Kafka answers them: after :data:`DELAY_MS`, no lockout. (The
    limiter, tested in test_authentication_limiter.py, doubled the delay of each failure of
    the module's tests from this one address, up to 5 s each.)"""
    sec = security(
        pki,
        authentication_failure_max_delay_ms=DELAY_MS,
        authentication_failure_limit_per_principal=0,
        authentication_failure_limit_per_host=0,
    )
    with secured(tmp_path_factory.mktemp("log"), sec) as s:
        yield s
