"""Produce v8+ ``record_errors`` and ``error_message`` as Kafka's ``ReplicaManager`` fills them
from a ``RecordValidationException``: hand-built batches over a raw socket (kio schemas)
against a real Broker behind a real BrokerServer."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.errors import MAX_RECORD_ERRORS
from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import log_records, served
from tests.broker_embedded.server.test_produce_api import NOW_MS, batch, produce9

COMPACT = {"cleanup.policy": "compact"}
KEYLESS = "Compacted topic cannot accept message without key in topic partition c-0"


def keyed(keys: list[bytes | None]) -> bytes:
    records = [ProducerRecord(key=k, value=b"v%d" % i) for i, k in enumerate(keys)]
    return build_batch(records, now_ms=NOW_MS)


def test_keyless_records_on_a_compacted_topic_are_listed(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("c", config=COMPACT)
        with RawClient(s.server) as c:
            p = produce9(c, "c", keyed([b"a", None, b"b", None, None, None, b"c"]))
            ok = produce9(c, "c", keyed([b"a", b"b"]))
    assert (p.error_code, p.base_offset) == (ErrorCode.invalid_record, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (i, KEYLESS) for i in (1, 3, 4, 5)
    ]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{KEYLESS}')" for i in (1, 3, 4))
    assert p.error_message == (
        "One or more records have been rejected due to 4 record errors in total, and only "
        f"showing the first three errors at most: [{shown}]"
    )
    assert (ok.error_code, ok.base_offset, ok.record_errors) == (ErrorCode.none, 0, ())
    assert [k for _, k, _, _ in log_records(tmp_path, "c", 0)] == [b"a", b"b"]


def test_record_errors_are_bounded(tmp_path):
    n = MAX_RECORD_ERRORS + 5
    with served(tmp_path) as s:
        s.broker.create_topic("c", config=COMPACT)
        with RawClient(s.server) as c:
            p = produce9(c, "c", keyed([None] * n))
    assert [e.batch_index for e in p.record_errors] == list(range(MAX_RECORD_ERRORS))
    assert p.error_message.startswith(f"One or more records have been rejected due to {n} ")


def test_batch_errors_have_no_record_errors(tmp_path):
    corrupt = bytearray(batch())
    corrupt[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    with served(tmp_path) as s:
        s.broker.create_topic("e")
        with RawClient(s.server) as c:
            bad_crc = produce9(c, "e", bytes(corrupt))
            two = produce9(c, "e", batch() + batch())  # one batch per partition only
    assert (bad_crc.error_code, bad_crc.record_errors) == (ErrorCode.corrupt_message, ())
    assert "CRC mismatch" in bad_crc.error_message and "'e'" in bad_crc.error_message
    assert (two.error_code, two.record_errors) == (ErrorCode.invalid_record, ())
