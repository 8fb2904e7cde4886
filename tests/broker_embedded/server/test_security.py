"""Listeners with TLS and SASL over loopback: real clients (kafka-python, confluent-kafka) and raw
frames against a real broker, with certificates made in the session (``_pki``).

One server per module holds the four listeners (PLAINTEXT, SSL with client certificates
requested, SASL_PLAINTEXT, SASL_SSL); tests that need other settings start their own.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time

import pytest
import scramp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.security.json_file import SecurityFileError
from broker_embedded.server.security.kafka_principal import subject_name
from broker_embedded.server.security.scram_credentials import (
    CredentialStore,
)
from broker_embedded.server.security.security_config import (
    SecurityConfig,
    SecurityProtocol,
    parse_listeners,
    parse_protocol_map,
)
from broker_embedded.storage.log_config import InvalidConfigError
from tests.broker_embedded.server._net import API_VERSIONS_V3, config, request_frame
from tests.broker_embedded.server._pki import (  # noqa: F401 (pki, server: fixtures)
    CLIENT_SUBJECT,
    DELAY_MS,
    LISTENERS,
    PASSWORD,
    USER,
    Pki,
    add_user,
    make_pki,
    pki_fixture,
    port,
    secured,
    security,
    server_fixture,
)
from tests.broker_embedded.server._serve import decode_response

TIMEOUT_S = 10.0
METADATA = MetadataRequest(
    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def client_context(pki: Pki, cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


class Wire:
    """One blocking connection (optionally TLS) speaking frames."""

    def __init__(self, p: int, context: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(("127.0.0.1", p), timeout=TIMEOUT_S)
        self.sock = context.wrap_socket(sock, server_hostname="127.0.0.1") if context else sock

    def recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def call(self, message: object, response: type, correlation_id: int = 1) -> object:
        self.sock.sendall(request_frame(message, correlation_id))
        frame = self.frame()
        assert frame[:4] == struct.pack(">i", correlation_id)
        return decode_response(response, frame, response.__flexible__)

    def authenticate(self, token: bytes) -> SaslAuthenticateResponse:
        return self.call(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse)

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def scram(wire: Wire, mechanism: str, user: str, password: str) -> SaslAuthenticateResponse:
    """A SCRAM exchange over SaslHandshake v1 + SaslAuthenticate v2; the last response."""
    handshake = wire.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse)
    assert handshake.error_code == ErrorCode.none
    client = scramp.ScramClient([mechanism], user, password)
    first = wire.authenticate(client.get_client_first().encode())
    if first.error_code != ErrorCode.none:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = wire.authenticate(client.get_client_final().encode())
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # checks the server's signature
    return final


# --- configuration -----------------------------------------------------------------------


def test_listener_names_map_to_protocols():
    mapping = parse_protocol_map("INTERNAL:PLAINTEXT, external:SASL_SSL")
    listeners = parse_listeners("INTERNAL://127.0.0.1:9092,EXTERNAL://[::1]:0", mapping)
    assert [(li.name, li.protocol, li.host, li.port) for li in listeners] == [
        ("INTERNAL", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),
        ("EXTERNAL", SecurityProtocol.SASL_SSL, "::1", 0),
    ]
    assert parse_listeners("SSL://h:1", mapping)[0].protocol is SecurityProtocol.SSL
    with pytest.raises(ValueError, match="OTHER is not in listener.security.protocol.map"):
        parse_listeners("OTHER://h:1", mapping)
    with pytest.raises(ValueError, match="name a listener twice"):
        parse_listeners("SSL://h:1,SSL://h:2", mapping)
    with pytest.raises(ValueError, match="is not NAME:PROTOCOL"):
        parse_protocol_map("X:TLS")


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"ssl.client.auth": "always"}, "ssl.client.auth must be one of required"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms 'GSSAPI'"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type must be PEM"),
        ({"ssl.keystore.pasword": "x"}, "unknown security config 'ssl.keystore.pasword'"),
        ({"sasl.server.max.receive.size": "1"}, "must be an integer >= 0"),
    ],
)
def test_bad_security_config_names_the_key(table, needle):
    with pytest.raises(InvalidConfigError, match=needle):
        SecurityConfig.from_mapping(table, "b.toml")


def test_tls_listener_without_a_keystore_is_refused(tmp_path):
    broker = Broker(tmp_path, create=True, config=config())
    try:
        with pytest.raises(InvalidConfigError, match="needs ssl.keystore.location"):
            broker_server(broker, ["SSL://127.0.0.1:0"], security=SecurityConfig())
    finally:
        broker.close()


def test_subject_is_written_as_java_x500_principal():
    subject = (
        (("countryName", "US"),),
        (("organizationName", "ex,ample"),),
        (("commonName", "alice"), ("userId", "a1")),
    )
    assert subject_name(subject) == "CN=alice+UID=a1,O=ex\\,ample,C=US"


def test_credentials_are_salted_never_clear(tmp_path):
    add_user(tmp_path)
    text = (tmp_path / "scram-credentials.json").read_text()
    assert PASSWORD not in text and '"iterations": 4096' in text
    assert (tmp_path / "scram-credentials.json").stat().st_mode & 0o777 == 0o600
    credential = CredentialStore(tmp_path).credential(USER, "SCRAM-SHA-256")
    assert credential is not None and len(credential.salt) == 32
    assert credential.matches("SCRAM-SHA-256", PASSWORD)
    assert not credential.matches("SCRAM-SHA-256", PASSWORD + "x")


# --- principals ----------------------------------------------------------------------------


def test_requests_carry_the_listener_and_principal(pki, tmp_path):
    """A handler sees ``User:<certificate subject>`` on SSL with a certificate, ANONYMOUS
    without one or on PLAINTEXT, and ``User:alice`` after SCRAM on SASL_SSL."""
    seen: list[tuple[str, str]] = []

    def register(apis: KafkaApis) -> None:
        def metadata(request):
            seen.append((request.listener, str(request.principal)))
            apis.send_no_response(request)

        apis.register(3, 12, 12, metadata)

    add_user(tmp_path)
    server = BrokerServer(config(), LISTENERS, register, security(pki), CredentialStore(tmp_path))
    with server:
        cases = [
            ("PLAINTEXT", None, False),
            ("SSL", client_context(pki), False),
            ("SSL", client_context(pki, cert=False), False),
            ("SASL_SSL", client_context(pki, cert=False), True),
        ]
        for index, (name, context, sasl) in enumerate(cases):
            wire = Wire(port(server, name), context)
            if sasl:
                assert scram(wire, "SCRAM-SHA-256", USER, PASSWORD).error_code == ErrorCode.none
            wire.sock.sendall(request_frame(METADATA, 5))
            deadline = time.monotonic() + TIMEOUT_S
            while len(seen) <= index:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            wire.close()
    assert seen == [
        ("PLAINTEXT", "User:ANONYMOUS"),
        ("SSL", f"User:{CLIENT_SUBJECT}"),
        ("SSL", "User:ANONYMOUS"),
        ("SASL_SSL", "User:alice"),
    ]


# --- real clients --------------------------------------------------------------------------

KAFKA_PYTHON_CASES = {
    "SSL": {"security_protocol": "SSL"},
    "SASL_PLAINTEXT-PLAIN": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
    "SASL_PLAINTEXT-SCRAM-SHA-256": {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
    },
    "SASL_PLAINTEXT-SCRAM-SHA-512": {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
    },
    "SASL_SSL-SCRAM-SHA-512": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"},
}


def kafka_python_options(pki: Pki, protocol: str, mechanism: str | None) -> dict:
    options: dict = {"security_protocol": protocol}
    if protocol.endswith("SSL"):
        options |= {"ssl_cafile": str(pki.ca)}
    if protocol == "SSL":
        options |= {"ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    if mechanism:
        options |= {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
        }
    return options


@pytest.mark.parametrize("case", sorted(KAFKA_PYTHON_CASES))
def test_kafka_python_produces_and_consumes(server, pki, case):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    protocol = KAFKA_PYTHON_CASES[case]["security_protocol"]
    options = kafka_python_options(pki, protocol, KAFKA_PYTHON_CASES[case].get("sasl_mechanism"))
    bootstrap = f"127.0.0.1:{port(server, protocol)}"
    topic = "kp-" + case.lower()
    values = [b"%d-" % i + bytes(300) for i in range(500)]  # ~150 KB: several TLS records
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **options)
    try:
        for value in values:
            producer.send(topic, value)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close(TIMEOUT_S)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, consumer_timeout_ms=2000, enable_auto_commit=False, **options
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got = [(m.offset, m.value) for m in consumer]
    finally:
        consumer.close()
    assert got == list(enumerate(values))


CONFLUENT_CASES = {
    "SSL": {"security.protocol": "SSL"},
    "SASL_SSL-SCRAM-SHA-256": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"},
    "SASL_PLAINTEXT-PLAIN": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
    "SASL_PLAINTEXT-SCRAM-SHA-512": {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
    },
}


def confluent_options(pki: Pki, case: dict) -> dict:
    options = dict(case)
    if case["security.protocol"].endswith("SSL"):
        options["ssl.ca.location"] = str(pki.ca)
    if case["security.protocol"] == "SSL":
        options |= {
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
    if "sasl.mechanism" in case:
        options |= {"sasl.username": USER, "sasl.password": PASSWORD}
    return options


@pytest.mark.parametrize("case", sorted(CONFLUENT_CASES))
def test_confluent_kafka_produces_and_consumes(server, pki, case):
    from confluent_kafka import Consumer, Producer, TopicPartition

    options = confluent_options(pki, CONFLUENT_CASES[case])
    protocol = options["security.protocol"]
    options["bootstrap.servers"] = f"127.0.0.1:{port(server, protocol)}"
    topic = "ck-" + case.lower()
    values = [b"%d-" % i + bytes(2000) for i in range(1000)]  # 2 MB: the TLS copy path
    producer = Producer({**options, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**options, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got == list(enumerate(values))


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_after_the_delay_and_closes(server, mechanism):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    started = time.monotonic()
    response = scram(wire, mechanism, USER, "wrong")
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )
    assert time.monotonic() - started >= DELAY_MS / 1000
    assert wire.closed()


def test_unknown_user_fails_at_the_first_message(server):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    response = scram(wire, "SCRAM-SHA-256", "mallory", PASSWORD)
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert wire.closed()


def test_wrong_plain_password_fails(server):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    handshake = wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    response = wire.authenticate(b"\0alice\0nope")
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == "Authentication failed: Invalid username or password"
    assert wire.closed()


def test_confluent_kafka_wrong_password_is_refused(server, pki):
    from confluent_kafka import KafkaError, KafkaException, Producer

    errors: list = []
    options = confluent_options(pki, CONFLUENT_CASES["SASL_SSL-SCRAM-SHA-256"])
    options |= {
        "sasl.password": "wrong",
        "error_cb": errors.append,
        "bootstrap.servers": f"127.0.0.1:{port(server, 'SASL_SSL')}",
    }
    producer = Producer(options)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)  # error_cb runs from poll
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed during authentication due to invalid credentials" in str(
        errors[0]
    )


def test_unsupported_mechanism_is_answered_then_closed(server):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    handshake = wire.call(SaslHandshakeRequest(mechanism="GSSAPI"), SaslHandshakeResponse)
    assert handshake.error_code == ErrorCode.unsupported_sasl_mechanism
    assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert wire.closed()


def test_metadata_before_authentication_closes_the_connection(server):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    wire.sock.sendall(request_frame(API_VERSIONS_V3, 1))  # allowed before authentication
    assert wire.frame()[:4] == struct.pack(">i", 1)
    wire.sock.sendall(request_frame(METADATA, 2))
    assert wire.closed()


def test_sasl_authenticate_without_handshake_fails_and_closes(server, pki):
    wire = Wire(port(server, "SASL_SSL"), client_context(pki, cert=False))
    response = wire.authenticate(b"\0alice\0" + PASSWORD.encode())
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == (
        "unexpected SASL token in state handshake (SaslHandshake first)"
    )
    assert wire.closed()


def test_oversized_frame_before_authentication_closes(server):
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    wire.sock.sendall(struct.pack(">i", 524_289))
    assert wire.closed()


def test_handshake_v0_then_raw_plain_token(server):
    """SaslHandshake v0: the next frames are raw SASL tokens, answered raw (an empty token)."""
    from kio.schema.sasl_handshake.v0.response import SaslHandshakeResponse as V0

    wire = Wire(port(server, "SASL_PLAINTEXT"))
    assert wire.call(SaslHandshakeRequestV0(mechanism="PLAIN"), V0).error_code == ErrorCode.none
    token = b"\0alice\0" + PASSWORD.encode()
    wire.sock.sendall(struct.pack(">i", len(token)) + token)
    assert wire.frame() == b""
    wire.sock.sendall(request_frame(API_VERSIONS_V3, 3))  # authenticated: served
    assert wire.frame()[:4] == struct.pack(">i", 3)


def test_client_auth_required_refuses_a_client_without_certificate(pki, tmp_path):
    with secured(tmp_path, security(pki, ssl_client_auth="required"), ["SSL://127.0.0.1:0"]) as s:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            wire = Wire(port(s, "SSL"), client_context(pki, cert=False))
            wire.call(API_VERSIONS_V3, object, 1)  # TLS 1.3 reports the refusal on read
        wire = Wire(port(s, "SSL"), client_context(pki))  # with one: served
        wire.sock.sendall(request_frame(API_VERSIONS_V3, 1))
        assert wire.frame()[:4] == struct.pack(">i", 1)


def test_a_stalled_handshake_is_dropped(pki, tmp_path):
    sec = security(pki, authentication_timeout_ms=300)
    with secured(tmp_path, sec, ["SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]) as s:
        stalled = [
            socket.create_connection(("127.0.0.1", port(s, n)), timeout=5)
            for n in ("SSL", "SASL_PLAINTEXT")
        ]
        for sock in stalled:
            assert sock.recv(1) == b""  # closed by the server within about 1.3 s
            sock.close()


def test_pipelined_requests_over_tls_are_all_answered(server, pki):
    """Two requests in one TLS record: the second waits decrypted inside ssl while the
    connection is muted, and is read when it is unmuted."""
    wire = Wire(port(server, "SSL"), client_context(pki))
    wire.sock.sendall(b"".join(request_frame(API_VERSIONS_V3, i) for i in range(1, 6)))
    assert [wire.frame()[:4] for _ in range(5)] == [struct.pack(">i", i) for i in range(1, 6)]


def test_users_command_adds_and_deletes(tmp_path, pki):
    from spark_kafkalog import cli

    log_dir = tmp_path / "log"
    with secured(log_dir, security(pki), ["SASL_PLAINTEXT://127.0.0.1:0"]) as s:
        p = port(s, "SASL_PLAINTEXT")
        assert (
            cli.main(
                [
                    "users",
                    "add",
                    "--log-dir",
                    str(log_dir),
                    "--user",
                    "bob",
                    "--password",
                    "bob-pw",
                    "--mechanism",
                    "SCRAM-SHA-512",
                ]
            )
            == 0
        )
        assert scram(Wire(p), "SCRAM-SHA-512", "bob", "bob-pw").error_code == ErrorCode.none
        assert cli.main(["users", "delete", "--log-dir", str(log_dir), "--user", "bob"]) == 0
        refused = scram(Wire(p), "SCRAM-SHA-512", "bob", "bob-pw")
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert cli.main(["users", "delete", "--log-dir", str(log_dir), "--user", "bob"]) == 1


def test_users_list_prints_no_secret(tmp_path, capsys):
    from spark_kafkalog import cli

    add_user(tmp_path)
    assert cli.main(["users", "list", "--log-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "alice SCRAM-SHA-256 iterations=4096\nalice SCRAM-SHA-512 iterations=4096\n"
    )


def test_wrong_passwords_do_not_stop_the_server_serving_others(pki, tmp_path):
    """Many concurrent failing clients (each delayed, none blocking the processors) while a
    good client authenticates at once (on a server of its own: a user with failures in the
    limiter's window waits as a failure would, and guesses of its own would lock it out,
    authentication_limiter.py; here the guesses name other users)."""
    failures: list[int] = []
    with secured(tmp_path / "log", security(pki), ["SASL_PLAINTEXT://127.0.0.1:0"]) as server:

        def guess(n: int) -> None:
            wire = Wire(port(server, "SASL_PLAINTEXT"))
            failures.append(scram(wire, "SCRAM-SHA-256", f"mallory-{n}", "guess").error_code)
            wire.close()

        threads = [threading.Thread(target=guess, args=(n,)) for n in range(40)]
        for t in threads:
            t.start()
        started = time.monotonic()
        good = scram(Wire(port(server, "SASL_PLAINTEXT")), "SCRAM-SHA-256", USER, PASSWORD)
        assert good.error_code == ErrorCode.none
        assert time.monotonic() - started < DELAY_MS / 1000  # not queued behind the delays
        for t in threads:
            t.join(TIMEOUT_S)
    assert failures == [ErrorCode.sasl_authentication_failed] * 40


# --- AlterUserScramCredentials / DescribeUserScramCredentials ------------------------------


def test_confluent_admin_alters_and_describes_scram_users(server):
    """confluent-kafka's admin client adds bob (it sends salt and SaltedPassword), who then
    authenticates; describe lists his mechanisms and iterations; a deletion locks him out."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port(server, 'PLAINTEXT')}"})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    upsert = UserScramCredentialUpsertion("bob", info, b"bob-pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(TIMEOUT_S) is None
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    assert scram(wire, "SCRAM-SHA-256", "bob", "bob-pw").error_code == ErrorCode.none
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        assert future.result(TIMEOUT_S) is None
    refused = scram(Wire(port(server, "SASL_PLAINTEXT")), "SCRAM-SHA-256", "bob", "bob-pw")
    assert refused.error_code == ErrorCode.sasl_authentication_failed


def test_scram_credential_requests_answer_kafkas_errors(server):
    from kio.schema.alter_user_scram_credentials.v0 import request as alter
    from kio.schema.alter_user_scram_credentials.v0.response import (
        AlterUserScramCredentialsResponse,
    )
    from kio.schema.describe_user_scram_credentials.v0 import request as describe
    from kio.schema.describe_user_scram_credentials.v0.response import (
        DescribeUserScramCredentialsResponse,
    )
    from kio.static.primitive import i8, i32

    def upsert(name: str, mechanism: int, iterations: int):
        return alter.ScramCredentialUpsertion(
            name=name,
            mechanism=i8(mechanism),
            iterations=i32(iterations),
            salt=b"s" * 16,
            salted_password=b"p" * 32,
        )

    request = alter.AlterUserScramCredentialsRequest(
        deletions=(
            alter.ScramCredentialDeletion(name="ghost", mechanism=i8(1)),
            alter.ScramCredentialDeletion(name="twice", mechanism=i8(2)),
        ),
        upsertions=(
            upsert("", 1, 4096),
            upsert("few", 1, 100),
            upsert("many", 2, 20000),
            upsert("odd", 3, 4096),
            upsert("twice", 2, 4096),
            upsert("dup", 1, 4096),
            upsert("dup", 2, 4096),
            upsert("carol", 2, 4096),
        ),
    )
    wire = Wire(port(server, "PLAINTEXT"))
    response = wire.call(request, AlterUserScramCredentialsResponse)
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
        (
            "ghost",
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        # its deletion failed first (Kafka's controller takes the deletions first)
        (
            "twice",
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("many", ErrorCode.unacceptable_credential, "Too many iterations"),
        ("odd", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        (
            "dup",
            ErrorCode.duplicate_resource,  # two mechanisms: still one user twice
            "A user credential cannot be altered twice in the same request",
        ),
        ("carol", ErrorCode.none, None),
    ]
    names = tuple(describe.UserName(name=n) for n in ("carol", "nobody", "alice", "alice"))
    described = wire.call(
        describe.DescribeUserScramCredentialsRequest(users=names),
        DescribeUserScramCredentialsResponse,
        2,
    )
    assert [
        (r.user, r.error_code, [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos])
        for r in described.results
    ] == [
        ("carol", ErrorCode.none, [(2, 4096)]),
        ("nobody", ErrorCode.resource_not_found, []),
        ("alice", ErrorCode.duplicate_resource, []),
    ]


def test_a_thousand_wrong_passwords_and_garbage_tokens_leave_the_server_serving(
    pki, tmp_path, caplog
):
    """1,000 wrong passwords from 8 threads, then 300 mutated SASL tokens (PLAIN and SCRAM);
    every one refused, a good client authenticated meanwhile, no traceback logged. The
    failed-authentication limits are off (Kafka's fixed delay): with them the guesses would
    lock the user and the address out (test_authentication_limiter.py)."""
    import random

    sec = security(
        pki,
        connection_failed_authentication_delay_ms=20,
        authentication_failure_max_delay_ms=20,
        authentication_failure_limit_per_principal=0,
        authentication_failure_limit_per_host=0,
    )
    with secured(tmp_path, sec, ["SASL_PLAINTEXT://127.0.0.1:0"]) as s:
        p = port(s, "SASL_PLAINTEXT")
        codes: list[int] = []

        def guesses(offset: int) -> None:
            for n in range(offset, 1000, 8):
                wire = Wire(p)
                codes.append(scram(wire, "SCRAM-SHA-512", USER, f"guess-{n}").error_code)
                wire.close()

        threads = [threading.Thread(target=guesses, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        good = scram(Wire(p), "SCRAM-SHA-512", USER, PASSWORD)
        for t in threads:
            t.join(120)
        assert good.error_code == ErrorCode.none
        assert codes == [ErrorCode.sasl_authentication_failed] * 1000
        rng = random.Random(15)
        valid = [b"\0alice\0" + PASSWORD.encode(), b"n,,n=alice,r=" + b"x" * 24]
        for i in range(300):
            token = bytearray(valid[i % 2])
            for _ in range(rng.randint(1, 4)):
                token[rng.randrange(len(token))] = rng.randrange(256)
            wire = Wire(p)
            mechanism = "PLAIN" if i % 2 == 0 else "SCRAM-SHA-256"
            wire.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse)
            answer = wire.authenticate(bytes(token))
            if answer.error_code == ErrorCode.none:  # a SCRAM first message still well formed
                assert mechanism == "SCRAM-SHA-256" and answer.auth_bytes.startswith(b"r=")
            else:
                assert answer.error_code == ErrorCode.sasl_authentication_failed
                assert wire.closed()
            wire.close()
        assert scram(Wire(p), "SCRAM-SHA-256", USER, PASSWORD).error_code == ErrorCode.none
    assert "Traceback" not in caplog.text


def test_conf_file_security_table_is_the_built_in_default():
    from broker_embedded.broker_config import DEFAULT_CONFIG_FILE, BrokerConfig
    from spark_kafkalog.serve_command import load_security

    assert load_security(DEFAULT_CONFIG_FILE) == SecurityConfig()
    assert BrokerConfig.load(DEFAULT_CONFIG_FILE) == BrokerConfig()  # [security] is not its own


def test_users_may_be_added_before_the_log_dirs_first_start(tmp_path):
    log_dir = tmp_path / "new"
    add_user(log_dir)
    Broker(log_dir, create=True, config=config()).close()  # not refused as "other files"
    assert CredentialStore(log_dir).credential(USER, "SCRAM-SHA-512") is not None


# --- a broken credentials file ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe", "is not a valid credentials file (not JSON"),
        (b'{"users": {"alice": {"SCRAM-SHA-256": {}}}}', "is not a valid credentials file: "),
        (None, "cannot read the credentials file: Is a directory"),
    ],
)
def test_a_broken_credentials_file_stops_the_start_naming_it(tmp_path, content, message):
    from spark_kafkalog import cli

    path = tmp_path / "scram-credentials.json"
    path.mkdir() if content is None else path.write_bytes(content)
    with Broker(tmp_path, create=True, config=config()) as broker:
        with pytest.raises(SecurityFileError) as refused:
            broker_server(broker, ["SASL_PLAINTEXT://127.0.0.1:0"])
    assert str(refused.value).startswith(f"{path} {message}" if content else f"{path}: {message}")
    assert cli.main(["users", "list", "--log-dir", str(tmp_path)]) == 1  # one line, no traceback


def test_a_running_server_keeps_its_users_when_the_file_breaks(pki, tmp_path):
    with secured(tmp_path, security(pki)) as s:
        (tmp_path / "scram-credentials.json").write_text("{broken")
        wire = Wire(port(s, "SASL_PLAINTEXT"))
        assert scram(wire, "SCRAM-SHA-256", USER, PASSWORD).error_code == ErrorCode.none


@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "no close_notify"])
def test_abandoned_long_polls_over_tls_release_their_connections(pki, tmp_path, close_notify):
    """TLS clients that send a forever long poll and close (with or without TLS close_notify,
    whose bytes the server reads after answering early): every connection is closed and no
    fetch is left waiting."""
    from tests.broker_embedded.server._fetch import fetch_request

    log_dir = tmp_path / "log"
    broker = Broker(log_dir, create=True, config=config())
    broker.create_topic("t", 1)
    broker.close()
    request = fetch_request(
        4, [("t", [(0, 0, 1 << 20, -1)])], max_wait_ms=2**31 - 1, min_bytes=2**31 - 1
    )
    with secured(log_dir, security(pki)) as server:
        for i in range(20):
            wire = Wire(port(server, "SSL"), client_context(pki))
            wire.sock.sendall(request_frame(request, i))
            if close_notify:  # sent without waiting for the server's
                wire.sock.setblocking(False)
                with contextlib.suppress(ssl.SSLWantReadError):
                    wire.sock.unwrap()
            wire.close()
        deadline = time.monotonic() + 20
        while server.socket_server.connection_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.socket_server.connection_count() == 0
