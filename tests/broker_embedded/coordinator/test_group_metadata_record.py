"""The records of __consumer_offsets: decoded from what Kafka 3.7 wrote (checked against a Java
decoder built on Kafka's own record reader and ConsumerProtocol, and against hand-assembled bytes),
re-encoded byte for byte, every value version round-tripped, corrupt bytes reported by place."""

from __future__ import annotations

import struct

import pytest

from broker_embedded.coordinator.consumer_protocol import (
    ConsumerAssignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from broker_embedded.coordinator.coordinator_partition import java_string_hash, partition_for
from broker_embedded.coordinator.group_metadata_record import (
    CorruptCoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordPlace,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_embedded.protocol.message_codec import MessageEncodeError
from tests.broker_embedded.coordinator._offsets_fixture import (
    GROUP,
    SEGMENT,
    fixture_records,
    java_dump,
)

# Java's String.hashCode and Kafka's partition of 50, printed by java/ConsumerOffsetsDump.java
# (Java 17): the empty string, a surrogate pair, and a hash of Integer.MIN_VALUE among them.
JAVA_HASHES = {
    "DEVSmileCDR": (551467806, 6),
    "my-group": (-1906497762, 36),
    "": (0, 0),
    "é€𝄞x": (519296651, 1),
    "polygenelubricants": (-2147483648, 0),
    "group-1": (293427299, 49),
    "console-consumer-12345": (158455506, 6),
    "Aa": (2112, 12),
    "BB": (2112, 12),
}

PERSISTENCE = "batch2.work.notification.SHR_PROD.persistence"
MATCHING = "subscription.matching.SHR_PROD.persistence"


@pytest.mark.parametrize("text", sorted(JAVA_HASHES))
def test_partition_for_is_javas_string_hash(text: str) -> None:
    assert (java_string_hash(text), partition_for(text)) == JAVA_HASHES[text]


def test_partition_for_other_counts() -> None:
    assert partition_for("my-group", 1) == 0
    assert partition_for("my-group", 7) == (-1906497762 & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError, match="at least 1"):
        partition_for("g", 0)


def test_fixture_group_is_on_partition_6() -> None:
    assert partition_for(GROUP) == 6  # the fixture's partition directory


# -- the Kafka 3.7 fixture -------------------------------------------------------------------------


def decoded_fixture() -> list[tuple[int, GroupRecord]]:
    out = []
    for r in fixture_records():
        place = RecordPlace(partition=6, offset=r.offset)
        key = decode_key(r.key, place)
        out.append((r.offset, GroupRecord(key, decode_value(key, r.value, place))))
    return out


def test_fixture_offset_commits_exact() -> None:
    commits = [
        (o, rec.key, rec.value)
        for o, rec in decoded_fixture()
        if isinstance(rec.key, OffsetCommitKey)
    ]
    expected = [
        (1, PERSISTENCE, 0, 1769791663122),
        (3, MATCHING, 0, 1769791783399),
        (8, "TestTopicPatient", 0, 1769792518111),
        (9, "Retry.TestTopicPatient", 0, 1769792518111),
        (10, "TestTopicPatient", 1, 1769792698395),
        (11, "TestTopicPatient", 2, 1769793423125),
        (12, "TestTopicPatient", 3, 1769793578176),
    ]
    assert commits == [
        (o, OffsetCommitKey(GROUP, topic, 0, 1), OffsetCommitValue(offset, "", ts, -1, -1, 3))
        for o, topic, offset, ts in expected
    ]


def test_fixture_group_metadata_exact() -> None:
    groups = [
        (o, rec.value) for o, rec in decoded_fixture() if isinstance(rec.key, GroupMetadataKey)
    ]
    assert all(
        rec.key == GroupMetadataKey(GROUP)
        for _, rec in decoded_fixture()
        if isinstance(rec.key, GroupMetadataKey)
    )
    summary = [
        (
            o,
            v.version,
            v.protocol_type,
            v.generation,
            v.protocol,
            v.current_state_timestamp,
            len(v.members),
        )
        for o, v in groups
    ]
    assert summary == [
        (0, 3, "consumer", 1, "range", 1769791662893, 8),
        (2, 3, "consumer", 2, "range", 1769791782909, 13),
        (4, 3, "consumer", 3, None, 1769791855188, 0),
        (5, 3, "consumer", 4, "range", 1769791918061, 8),
        (6, 3, "consumer", 5, "range", 1769792038073, 13),
        (7, 3, "consumer", 6, "range", 1769792518084, 17),
    ]
    last = groups[-1][1]
    assert last.leader == "consumer-DEVSmileCDR-8-66bebf6e-cac0-40fa-aac4-3cf0fb0cbb49"
    assert groups[2][1].leader is None
    assigned = {
        m.member_id: decode_assignment(m.assignment).partitions
        for m in last.members
        if decode_assignment(m.assignment).partitions
    }
    assert assigned == {
        "consumer-DEVSmileCDR-10-399102ad-1370-46bf-a716-1284532fee38": ((MATCHING, 0),),
        "consumer-DEVSmileCDR-14-9988674a-a7c5-4c0f-b939-59e81f962eea": (("TestTopicPatient", 0),),
        "consumer-DEVSmileCDR-1-88570c7a-482e-45c7-800a-726fe3e294ce": ((PERSISTENCE, 0),),
        "consumer-DEVSmileCDR-16-55070d40-2de4-4754-89a0-23021dc3271f": (
            ("Retry.TestTopicPatient", 0),
        ),
    }
    first = last.members[0]
    assert (
        first.client_id,
        first.client_host,
        first.session_timeout,
        first.rebalance_timeout,
        first.group_instance_id,
    ) == ("consumer-DEVSmileCDR-8", "/172.18.0.5", 420000, 3600000, None)
    sub = decode_subscription(first.subscription)
    assert (sub.version, sub.topics, sub.user_data, sub.rack_id) == (3, (PERSISTENCE,), None, None)


def _java_line(offset: int, rec: GroupRecord) -> list[str]:
    """The Java decoder's line(s) for one record, from kafkalog's decoding."""
    k, v = rec.key, rec.value
    if isinstance(k, OffsetCommitKey):
        assert isinstance(v, OffsetCommitValue)
        return [
            f"offset={offset} OffsetCommit key_version={k.version} group={k.group} "
            f"topic={k.topic} partition={k.partition} value_version={v.version} "
            f"offset={v.offset} leaderEpoch={v.leader_epoch} metadata={v.metadata} "
            f"commitTimestamp={v.commit_timestamp} expireTimestamp={v.expire_timestamp}"
        ]
    assert isinstance(v, GroupMetadataValue)
    lines = [
        f"offset={offset} GroupMetadata group={k.group} value_version={v.version} "
        f"protocolType={v.protocol_type} generation={v.generation} protocol={v.protocol or 'null'}"
        f" leader={v.leader or 'null'} currentStateTimestamp={v.current_state_timestamp} "
        f"members={len(v.members)}"
    ]
    for m in v.members:
        topics = ", ".join(decode_subscription(m.subscription).topics)
        assigned = ", ".join(f"{t}:{p}" for t, p in decode_assignment(m.assignment).partitions)
        lines.append(
            f"  member memberId={m.member_id} groupInstanceId={m.group_instance_id or 'null'} "
            f"clientId={m.client_id} clientHost={m.client_host} "
            f"rebalanceTimeout={m.rebalance_timeout} sessionTimeout={m.session_timeout} "
            f"topics=[{topics}] assignment=[{assigned}]"
        )
    return lines


def test_fixture_matches_the_java_decoder() -> None:
    """Every record as Kafka's FileRecords reads it and a Java decoder following Kafka's JSON
    schemas (with Kafka's ConsumerProtocol for the member bytes) decodes it; and Java's hashes."""
    java = java_dump(SEGMENT, *JAVA_HASHES)
    ours = [line for o, rec in decoded_fixture() for line in _java_line(o, rec)]
    hashes = [f"hash {s} {h} {p}" for s, (h, p) in JAVA_HASHES.items()]
    assert java == ours + hashes
    assert len(ours) == 13 + 8 + 13 + 0 + 8 + 13 + 17


def test_fixture_reencodes_byte_for_byte() -> None:
    records = fixture_records()
    assert len(records) == 13
    for r, (_, rec) in zip(records, decoded_fixture(), strict=True):
        assert rec.encode() == (r.key, r.value)


def test_hand_assembled_offset_commit_bytes() -> None:
    """The last commit of the fixture (offset 12) assembled by hand from the schemas."""
    key = (
        struct.pack(">hh", 1, 11)
        + b"DEVSmileCDR"
        + struct.pack(">h", 16)
        + b"TestTopicPatient"
        + struct.pack(">i", 0)
    )
    value = struct.pack(">hqih", 3, 3, -1, 0) + struct.pack(">q", 1769793578176)
    assert (key, value) == (fixture_records()[12].key, fixture_records()[12].value)
    assert decode_key(key) == OffsetCommitKey(GROUP, "TestTopicPatient", 0)
    assert decode_value(decode_key(key), value) == OffsetCommitValue(3, "", 1769793578176)


# -- every version ---------------------------------------------------------------------------------

MEMBER = MemberMetadata(
    "m-1",
    "client-1",
    "/10.0.0.1",
    45000,
    b"\x00\x01sub",
    b"\x00\x01asg",
    rebalance_timeout=300000,
    group_instance_id="instance-1",
)


@pytest.mark.parametrize("version", range(5))
def test_offset_commit_value_versions_round_trip(version: int) -> None:
    full = OffsetCommitValue(
        42, "meta-é", 1000, leader_epoch=7, expire_timestamp=2000, version=version
    )
    decoded = decode_value(OffsetCommitKey("g", "t", 0), encode_value(full))
    # fields a version lacks come back as their defaults (Kafka drops ignorable fields)
    assert decoded == OffsetCommitValue(
        42,
        "meta-é",
        1000,
        leader_epoch=7 if version >= 3 else -1,
        expire_timestamp=2000 if version == 1 else -1,
        version=version,
    )
    assert encode_value(decoded) == encode_value(full)


@pytest.mark.parametrize("version", range(5))
def test_group_metadata_value_versions_round_trip(version: int) -> None:
    full = GroupMetadataValue("consumer", 9, "range", "m-1", (MEMBER,), 123456, version=version)
    decoded = decode_value(GroupMetadataKey("g"), encode_value(full))
    member = MemberMetadata(
        "m-1",
        "client-1",
        "/10.0.0.1",
        45000,
        b"\x00\x01sub",
        b"\x00\x01asg",
        rebalance_timeout=300000 if version >= 1 else -1,
        group_instance_id="instance-1" if version >= 3 else None,
    )
    stamp = 123456 if version >= 2 else -1
    assert decoded == GroupMetadataValue("consumer", 9, "range", "m-1", (member,), stamp, version)


def test_flexible_v4_bytes_and_unknown_tags_kept() -> None:
    value = OffsetCommitValue(
        5, "m", 9, leader_epoch=2, version=4, unknown_tagged_fields=((3, b"\xaa\xbb"),)
    )
    raw = encode_value(value)
    # version, offset, epoch, compact string "m" (length + 1), commit ts, 1 tag: 3, size 2, bytes
    assert raw == (
        struct.pack(">hqi", 4, 5, 2) + b"\x02m" + struct.pack(">q", 9) + b"\x01\x03\x02\xaa\xbb"
    )
    assert decode_value(OffsetCommitKey("g", "t", 0), raw) == value
    group = GroupMetadataValue(
        "", 0, None, None, (MEMBER,), version=4, unknown_tagged_fields=((0, b"x"),)
    )
    assert decode_value(GroupMetadataKey("g"), encode_value(group)) == group


def test_keys_round_trip_and_tombstones() -> None:
    for key in (
        OffsetCommitKey("g", "t", 3, 0),
        OffsetCommitKey("g", "t", 3),
        GroupMetadataKey("g"),
    ):
        assert decode_key(encode_key(key)) == key
        assert decode_value(key, None) is None
        assert GroupRecord(key).encode() == (encode_key(key), None)


def test_new_protocol_record_types_are_named_unknown_keys() -> None:
    assert decode_key(struct.pack(">h", 3) + b"\x00\x01g") == UnknownKey(3)
    assert UnknownKey(3).name == "ConsumerGroupMetadata (record type 3)"
    assert UnknownKey(99).name == "record type 99"


# -- corrupt bytes ---------------------------------------------------------------------------------

PLACE = RecordPlace(partition=6, offset=12, source="00000000000000000000.log")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, None, "corrupt key .* offset 12 .*the key is null"),
        (b"\x00", None, "corrupt key .*key version needs 2 bytes at byte 0 but only 1 remain"),
        (b"\x00\x02\x00\x05ab", None, "corrupt key .*group needs 5 bytes at byte 4"),
        (b"\x00\x02\xff\xfe", None, "group has length -2"),
        (b"\x00\x02\x00\x01\xff", None, "group is not valid UTF-8"),
        (b"\x00\x02\xff\xff", None, "group is null but the schema does not allow it"),
        (b"\xff\xff", None, "negative key version -1"),
        (encode_key(GroupMetadataKey("g")), b"\x00\x05", "GroupMetadataValue version 5"),
        (encode_key(GroupMetadataKey("g")), b"\x00\x03\x00", "protocolType needs 2 bytes"),
        (encode_key(OffsetCommitKey("g", "t", 0)), b"\x00\x03" + bytes(12), "metadata needs"),
        (
            encode_key(GroupMetadataKey("g")),
            b"\x00\x03\x00\x00" + bytes(4) + b"\xff\xff" * 2 + bytes(8) + b"\x7f\xff\xff\xff",
            "members declares 2147483647 elements but only 0 bytes remain",
        ),
        (
            encode_key(OffsetCommitKey("g", "t", 0)),
            b"\x00\x04" + bytes(12) + b"\x80",
            "metadata: .*varint",
        ),
    ],
)
def test_corrupt_records_name_topic_partition_offset(key, value, message) -> None:
    with pytest.raises(CorruptCoordinatorRecordError, match=message) as info:
        decode_value(decode_key(key, PLACE), value, PLACE)
    assert "topic '__consumer_offsets' partition 6 offset 12 in 00000000000000000000.log" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (OffsetCommitValue(1 << 63, "", 0), "offset = 9223372036854775808 does not fit"),
        (OffsetCommitValue(0, "", 0, version=5), "OffsetCommitValue version 5"),
        (GroupMetadataValue("c", 0, None, None, version=-1), "GroupMetadataValue version -1"),
        (GroupMetadataValue(None, 0, None, None), "protocolType is null"),  # type: ignore[arg-type]
        (OffsetCommitValue(0, "x" * 40000, 0), "metadata is 40000 bytes"),
    ],
)
def test_unencodable_values_are_domain_errors(value, message) -> None:
    with pytest.raises(MessageEncodeError, match=message):
        encode_value(value)


def test_assignment_round_trip() -> None:
    a = ConsumerAssignment((("t", 0), ("t", 2), ("u", 1)), b"ud", 3)
    assert decode_assignment(encode_assignment(a)) == a
    assert decode_assignment(b"") == ConsumerAssignment()
