"""The records of __transaction_state: bytes assembled by hand from Kafka's TransactionLogKey and
TransactionLogValue schemas (v0, and flexible v1 with its tagged fields), round trips, errors."""

from __future__ import annotations

import struct

import pytest

from broker_embedded.coordinator.coordinator_partition import partition_for
from broker_embedded.coordinator.group_metadata_record import CorruptCoordinatorRecordError
from broker_embedded.coordinator.transaction_log_record import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionStatus,
    TxnPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    place_in_log,
)
from broker_embedded.protocol.message_codec import MessageEncodeError

ONGOING = TransactionLogValue(
    producer_id=4000,
    producer_epoch=3,
    transaction_timeout_ms=60000,
    status=TransactionStatus.ONGOING,
    partitions=(TxnPartitions("out", (0, 2)),),
    last_update_timestamp_ms=1700000000500,
    start_timestamp_ms=1700000000000,
)

V0_BYTES = (
    struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
    + struct.pack(">i", 1)
    + struct.pack(">h", 3)
    + b"out"
    + struct.pack(">iii", 2, 0, 2)
    + struct.pack(">qq", 1700000000500, 1700000000000)
)


def test_key_bytes() -> None:
    key = TransactionLogKey("txn-é")
    raw = struct.pack(">hh", 0, 6) + "txn-é".encode()
    assert encode_key(key) == raw
    assert decode_key(raw) == key
    assert partition_for("txn-é") == partition_for(key.transactional_id)


def test_v0_value_bytes() -> None:
    assert encode_value(ONGOING) == V0_BYTES
    assert decode_value(V0_BYTES) == ONGOING


def test_v1_value_bytes_with_tagged_fields() -> None:
    value = TransactionLogValue(
        4000,
        3,
        60000,
        TransactionStatus.PREPARE_COMMIT,
        (TxnPartitions("out", (0, 2)),),
        1700000000500,
        1700000000000,
        previous_producer_id=3999,
        client_transaction_version=2,
        version=1,
        unknown_tagged_fields=((7, b"\x01"),),
    )
    raw = (
        struct.pack(">hqhib", 1, 4000, 3, 60000, 2)
        + b"\x02"
        + b"\x04out"
        + b"\x03"
        + struct.pack(">ii", 0, 2)
        + b"\x00"  # compact, 0 tags
        + struct.pack(">qq", 1700000000500, 1700000000000)
        + b"\x03"  # three tagged fields, in tag order; nextProducerId (tag 1) is the default
        + b"\x00\x08"
        + struct.pack(">q", 3999)
        + b"\x02\x02"
        + struct.pack(">h", 2)
        + b"\x07\x01\x01"
    )
    assert encode_value(value) == raw
    assert decode_value(raw) == value


def test_empty_transaction_has_null_partitions_and_tombstones() -> None:
    empty = TransactionLogValue(7, 0, 60000, TransactionStatus.EMPTY, None, 5, -1)
    raw = encode_value(empty)
    assert raw[17:21] == b"\xff\xff\xff\xff"  # null array (int32 -1) after the status byte
    assert decode_value(raw) == empty
    flexible = TransactionLogValue(7, 0, 60000, TransactionStatus.EMPTY, None, 5, -1, version=1)
    assert encode_value(flexible)[17] == 0  # compact null array
    assert decode_value(encode_value(flexible)) == flexible
    assert encode_value(None) is None and decode_value(None) is None


def test_v0_drops_tagged_fields() -> None:
    value = TransactionLogValue(1, 0, 1, TransactionStatus.EMPTY, None, 0, 0, next_producer_id=9)
    assert decode_value(encode_value(value)).next_producer_id == -1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (V0_BYTES[:16] + b"\x08" + V0_BYTES[17:], "transactionStatus 8 is not a transaction state"),
        (V0_BYTES[:-1], "transactionStartTimestampMs needs 8 bytes"),
        (b"\x00\x02", "TransactionLogValue version 2"),
        (
            struct.pack(">hqhib", 1, 1, 0, 1, 0) + b"\x00" + bytes(16) + b"\x01\x01\x02\x00\x01",
            "nextProducerId has 2 bytes, not 8",
        ),
        (
            struct.pack(">hqhib", 1, 1, 0, 1, 0) + b"\x00" + bytes(16) + b"\x02\x01\x00\x00\x00",
            "tag 0 follows tag 1",
        ),
    ],
)
def test_corrupt_values_name_the_record(raw: bytes, message: str) -> None:
    with pytest.raises(CorruptCoordinatorRecordError, match=message) as info:
        decode_value(raw, place_in_log(12, 345))
    assert "topic '__transaction_state' partition 12 offset 345" in str(info.value)


def test_corrupt_keys() -> None:
    with pytest.raises(CorruptCoordinatorRecordError, match="TransactionLogKey version 1 is not 0"):
        decode_key(b"\x00\x01\x00\x00")
    with pytest.raises(CorruptCoordinatorRecordError, match="key is null"):
        decode_key(None)


def test_unencodable() -> None:
    with pytest.raises(MessageEncodeError, match="producerEpoch = 40000 does not fit"):
        encode_value(TransactionLogValue(1, 40000, 1, TransactionStatus.EMPTY, None, 0, 0))
    with pytest.raises(MessageEncodeError, match="TransactionLogValue version 2"):
        encode_value(TransactionLogValue(1, 0, 1, TransactionStatus.EMPTY, None, 0, 0, version=2))
