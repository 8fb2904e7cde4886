"""The one option table (datasource/option_table.py) names exactly the options the parsers
take: the source's lists of names come from it, and the writers' names and the wire client's
settings are checked here against it, so a new option without a row (and so without a line in
the generated docs) fails."""

from __future__ import annotations

from broker_embedded.client.wire_fetch_source import WireSource
from datasource import kafka_source_options as source
from datasource import kafka_write_options as write
from datasource import option_table, wire_writer


def test_the_source_takes_exactly_the_read_rows() -> None:
    read_kinds = (
        "read",
        "batch",
        "view",
        "streaming-limit",
        "streaming",
        "spark-consumer",
        "spark-client",
    )
    assert set(source.OPTION_NAMES.values()) == {
        *option_table.names(*read_kinds),
        "kafka.bootstrap.servers",
    }


def test_the_client_rows_are_the_wire_clients_settings() -> None:
    assert {n.lower() for n in option_table.names("client", "spark-client")} == {
        "kafka.bootstrap.servers",
        *source.CLIENT_SETTINGS,
    }


def test_the_write_rows_are_the_writers_options() -> None:
    assert set(option_table.names("write")) == set(write.OPTION_NAMES.values())
    assert set(option_table.names("wire-write")) == {
        write.PREFIX,
        wire_writer.TXN_TIMEOUT,
        "kafka.acks",
    }


def test_every_row_has_a_known_kind_and_a_meaning() -> None:
    assert [r.name for r in option_table.ROWS if r.kind not in option_table.KINDS] == []
    assert [r.name for r in option_table.ROWS if not r.meaning] == []
    assert {r.origin for r in option_table.ROWS} == {"Spark", "kafkalog"}


def test_the_defaults_the_code_uses_are_the_tables() -> None:
    default = {row.name: row.default for row in option_table.ROWS}
    parsed = source.KafkaSourceOptions.parse({"path": "/d", "subscribe": "t"}, streaming=False)
    assert default["failOnDataLoss"] == "true" and parsed.fail_on_data_loss is True
    assert default["includeHeaders"] == "false" and parsed.include_headers is False
    assert default["kafka.transaction.timeout.ms"] == str(wire_writer.DEFAULT_TXN_TIMEOUT_MS)
    assert default["kafka.max.partition.fetch.bytes"] == str(
        source.DEFAULT_MAX_PARTITION_FETCH_BYTES
    )
    assert default["kafka.fetch.max.bytes"] == str(source.DEFAULT_FETCH_MAX_BYTES)
    assert default["kafkaConsumer.pollTimeoutMs"] == str(WireSource("h:1").poll_timeout_ms)
