"""The differential harness itself, without Kafka: requests built from plain values, record
batches decoded, what is normalized and what is not, differences by path."""

from __future__ import annotations

import time
import uuid

from broker_embedded.protocol.schemas import encode_body, reader_of, request_schema
from tests.differential.harness import (
    ABSENT,
    Difference,
    Normalizer,
    build,
    diff,
    field_name,
    plain_batches,
    to_plain,
)
from tests.differential.scenario import BASE_TIMESTAMP, batch


def test_a_request_from_plain_values_round_trips() -> None:
    topic_id = str(uuid.uuid4())
    values = {
        "replica_id": -1,
        "max_wait": 250,
        "min_bytes": 1,
        "max_bytes": 1000,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 7,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 99,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    schema = request_schema(1, 13)
    message = build(schema, values)
    again, _ = reader_of(schema)(memoryview(encode_body(message)), 0)
    plain = to_plain(again)
    assert plain["max_wait"] == 250  # a duration in milliseconds
    assert plain["topics"][0]["topic_id"] == topic_id
    assert plain["topics"][0]["partitions"][0]["fetch_offset"] == 7
    assert "topic" not in plain["topics"][0]  # v13 names topics by id only


def test_records_are_decoded_batches_and_a_partial_tail() -> None:
    data = batch([b"a", b"b"], compression=3)
    plain = plain_batches(data + data[:20])
    assert plain["partial_tail_bytes"] == 20
    (only,) = plain["batches"]
    assert (only["base_offset"], only["records_count"], only["attributes"]) == (0, 2, 3)
    assert only["crc_valid"] is True
    assert only["records"][1] == {
        "offset": 1,
        "timestamp": BASE_TIMESTAMP + 1,
        "key": b"k1",
        "value": b"b",
        "headers": [],
    }


def test_normalizing_masks_maps_and_keeps() -> None:
    normalize = Normalizer()
    now = int(time.time() * 1000)
    answer = {
        "cluster_id": "abc",
        "throttle_time": 0,
        "error_message": None,
        "node_id": 1,
        "members": [{"member_id": "m-9"}, {"member_id": "m-3"}, {"member_id": "m-9"}],
        "producer_id": 0,
        "log_append_time": now,
        "timestamp": BASE_TIMESTAMP,
    }
    assert normalize(answer) == {
        "cluster_id": "<masked>",
        "throttle_time": 0,
        "error_message": None,
        "node_id": 1,
        "members": [
            {"member_id": "<member#0>"},
            {"member_id": "<member#1>"},
            {"member_id": "<member#0>"},
        ],
        "producer_id": "<producer#0>",
        "log_append_time": "<now>",
        "timestamp": BASE_TIMESTAMP,
    }


def test_differences_by_path_with_named_entries_in_any_order() -> None:
    kafka = {"topics": [{"name": "a", "x": 1}, {"name": "b", "x": 2}], "list": [1, 2]}
    ours = {"topics": [{"name": "b", "x": 3}, {"name": "a", "x": 1}], "list": [1]}
    found = diff(kafka, ours)
    assert found == [
        Difference(".topics.{b}.x", 2, 3),
        Difference(".list[1]", 2, ABSENT),
    ]
    assert field_name(".topics.{diff-t-1}.partitions[0].configs.{retention.ms}") == (
        ".topics.partitions.configs.{retention.ms}"
    )


def test_a_zombie_or_unadded_transactional_write_is_refused(tmp_path) -> None:
    """The transactions scenario on kafkalog alone (no peer needed): after the producer was
    fenced, its old epoch's write is INVALID_PRODUCER_EPOCH, and the new epoch's write to a
    partition it did not add is INVALID_TXN_STATE, as Kafka 3.9 answers (KIP-890 part 1)."""
    from tests.differential.scenario import run_on
    from tests.differential.scenarios import transactions
    from tests.differential.servers import kafkalog_server

    with kafkalog_server(tmp_path / "logs") as bootstrap:
        answers = {e.label: e.answer for e in run_on(transactions, bootstrap, "zombie")}
    for label, error in (
        ("produce, old epoch", "invalid_producer_epoch"),
        ("produce, partition not added", "invalid_txn_state"),
        ("produce 1", "none"),
    ):
        (topic,) = answers[label]["responses"]
        assert topic["partition_responses"][0]["error_code"] == error, label
        assert topic["partition_responses"][0]["base_offset"] == (-1 if error != "none" else 3)
