"""The Spark source and sink over SASL_SSL (SCRAM-SHA-512) and SSL with Spark's Kafka option
names (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``), against a real broker on TLS listeners; a wrong password fails the
query naming the broker."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("kio", reason="the wire client needs kio (Python 3.11+)")

from broker_embedded.client.kafka_client import KafkaClient  # noqa: E402
from tests.broker_embedded.server._pki import (  # noqa: E402
    PASSWORD,
    USER,
    make_pki,
    port,
    secured,
    security,
)

TOPIC = "secure"
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="{USER}" password="{{}}";'
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    with secured(tmp_path_factory.mktemp("log"), security(pki)) as server:
        plain = f"127.0.0.1:{port(server, 'PLAINTEXT')}"
        with KafkaClient(plain) as client:
            client.create_topic(TOPIC, 1, 1, {})
        yield server, pki


def sasl_ssl(server, pki, password: str = PASSWORD) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": f"127.0.0.1:{port(server, 'SASL_SSL')}",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": str(pki.ca),
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS.format(password),
    }


def test_spark_writes_and_reads_over_sasl_ssl(spark, served) -> None:
    server, pki = served
    options = sasl_ssl(server, pki)
    rows = [(f"k{i}", f"v{i}" * 50) for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, value string").coalesce(1)
    df.write.format("kafkalog").mode("append").options(**options).option("topic", TOPIC).save()
    got = (
        spark.read.format("kafkalog")
        .options(**options)
        .option("subscribe", TOPIC)
        .load()
        .selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "offset")
        .collect()
    )
    assert sorted((r.offset, r.k, r.v) for r in got) == [(i, k, v) for i, (k, v) in enumerate(rows)]
    # the same topic over SSL with a client certificate
    ssl_options = {
        "kafka.bootstrap.servers": f"127.0.0.1:{port(server, 'SSL')}",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(pki.ca),
        "kafka.ssl.keystore.location": str(pki.client_cert),
        "kafka.ssl.key.location": str(pki.client_key),
    }
    count = spark.read.format("kafkalog").options(**ssl_options).option("subscribe", TOPIC).load()
    assert count.count() == len(rows)


def test_a_wrong_password_fails_the_read_naming_the_broker(spark, served) -> None:
    server, pki = served
    options = sasl_ssl(server, pki, password="wrong")
    with pytest.raises(Exception, match="authentication with broker 127.0.0.1:"):
        spark.read.format("kafkalog").options(**options).option("subscribe", TOPIC).load().count()


def test_bad_security_options_fail_naming_the_option(spark, served, tmp_path: Path) -> None:
    server, pki = served
    options = {**sasl_ssl(server, pki), "kafka.sasl.mechanism": "GSSAPI"}
    with pytest.raises(Exception, match="sasl.mechanism='GSSAPI' is not supported"):
        spark.read.format("kafkalog").options(**options).option("subscribe", TOPIC).load().count()
