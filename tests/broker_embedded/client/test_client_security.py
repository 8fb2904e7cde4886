"""The wire client over TLS and SASL against a real ``kafkalog serve`` request path: Kafka's
client properties parsed as Kafka's clients take them, produce and fetch through each kind of
listener, and refusals that name the broker."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("kio", reason="the wire client needs kio (Python 3.11+)")

from broker_embedded.client.broker_connection import BrokerConnectionError, ClientConfig
from broker_embedded.client.client_security import (  # noqa: E402
    ClientSecurity,
    SaslAuthenticationError,
    parse_jaas,
)
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.common.producer_record import ProducerRecord, build_batch  # noqa: E402
from broker_embedded.server.broker_server import BrokerServer  # noqa: E402
from tests.broker_embedded.server._pki import (  # noqa: E402, F401 (pki, server: fixtures)
    PASSWORD,
    USER,
    Pki,
    make_pki,
    pki_fixture,
    port,
    secured,
    security,
    server_fixture,
)

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
    f'password="{PASSWORD}";'
)
SCRAM_JAAS = PLAIN_JAAS.replace("plain.PlainLoginModule", "scram.ScramLoginModule")


def properties(pki: Pki, protocol: str, mechanism: str | None = None) -> dict[str, str]:
    props = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        props["ssl.truststore.location"] = str(pki.ca)
    if protocol == "SSL":
        props |= {
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
    if mechanism:
        jaas = PLAIN_JAAS if mechanism == "PLAIN" else SCRAM_JAAS
        props |= {"sasl.mechanism": mechanism, "sasl.jaas.config": jaas}
    return props


def client(server: BrokerServer, props: dict[str, str]) -> KafkaClient:
    config = ClientConfig(security=ClientSecurity.from_properties(props), request_timeout_s=10)
    return KafkaClient(f"127.0.0.1:{port(server, props['security.protocol'])}", config)


def test_jaas_config_gives_username_and_password():
    assert parse_jaas(SCRAM_JAAS) == {"username": USER, "password": PASSWORD}
    assert parse_jaas('x.Y required username="a\\"b" password="";') == {
        "username": 'a"b',
        "password": "",
    }
    with pytest.raises(ValueError, match="is not '<LoginModule class> required"):
        parse_jaas('username="a" password="b"')


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"security.protocol": "TLS"}, "security.protocol='TLS' is not one of"),
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism='GSSAPI' is not supported"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a username"),
        ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type='JKS' is not supported"),
        ({"ssl.trustsore.location": "x"}, "client property ssl.trustsore.location"),
    ],
)
def test_bad_properties_name_the_property(props, needle):
    with pytest.raises(ValueError, match=needle):
        ClientSecurity.from_properties(props)


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SSL", None),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("PLAINTEXT", None),
    ],
)
def test_produce_and_fetch_through_each_listener(server, pki, protocol, mechanism):
    topic = f"c-{protocol}-{mechanism}".lower()
    records = [ProducerRecord(bytes(1000) + b"%d" % i, f"k{i}".encode()) for i in range(300)]
    with client(server, properties(pki, protocol, mechanism)) as c:
        c.create_topic(topic, 1, 1, {})
        deadline = time.monotonic() + 10
        while not c.metadata([topic])[0].partitions:  # the topic's leader is elected
            assert time.monotonic() < deadline
            time.sleep(0.05)
        batch = build_batch(records, now_ms=1_700_000_000_000)
        assert c.produce(topic, 0, batch, acks=-1) == 0
        fetched = c.fetch(topic, 0, 0, 1 << 20, 0)
    assert fetched.high_watermark == 300
    # the batch comes back byte for byte (on TLS: the copy path), the leader epoch stamped
    got = bytes(fetched.records)
    assert (got[:12], got[12:16], got[16:]) == (batch[:12], bytes(4), batch[16:])


def test_wrong_password_raises_naming_the_broker(server, pki):
    props = properties(pki, "SASL_SSL", "SCRAM-SHA-256")
    props["sasl.jaas.config"] = SCRAM_JAAS.replace(PASSWORD, "wrong")
    with pytest.raises(SaslAuthenticationError, match="authentication with broker 127.0.0.1:"):
        client(server, props).metadata()


def test_untrusted_broker_certificate_fails_the_handshake(server, pki):
    props = {"security.protocol": "SSL"}  # the system CAs do not sign the test CA
    with pytest.raises(BrokerConnectionError, match="TLS with broker 127.0.0.1:.* failed"):
        client(server, props).metadata()
