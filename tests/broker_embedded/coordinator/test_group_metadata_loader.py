"""Loading __consumer_offsets partitions into groups: the Kafka 3.7 log dir exactly, and a
partition written here with every rule of Kafka's loader (tombstones, transactional offsets and
their markers, new-protocol records skipped, compressed batches, corrupt records)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.coordinator.consumer_protocol import (
    ConsumerAssignment,
    decode_assignment,
    encode_assignment,
)
from broker_embedded.coordinator.group_metadata_loader import (
    CommittedOffset,
    DuplicateGroupError,
    load_log_dir,
)
from broker_embedded.coordinator.group_metadata_record import (
    CorruptCoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import ControlRecordType, EndTransactionMarker
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.log_dir import LogDir
from tests.broker_embedded.coordinator._offsets_fixture import GROUP, copy_log_dir

PERSISTENCE = "batch2.work.notification.SHR_PROD.persistence"
MATCHING = "subscription.matching.SHR_PROD.persistence"


def test_kafka_37_log_dir_exact(tmp_path: Path) -> None:
    loaded = load_log_dir(LogDir(copy_log_dir(tmp_path)))
    assert (loaded.records, loaded.skipped, loaded.pending_offsets) == (13, {}, 0)
    assert list(loaded.groups) == [GROUP]
    group = loaded.groups[GROUP]
    assert (group.state, group.coordinator_partition) == ("Stable", 6)
    assert group.protocol_type == "consumer"
    assert [
        (c.topic, c.partition, c.offset, c.commit_timestamp, c.record_offset) for c in group.offsets
    ] == [
        ("Retry.TestTopicPatient", 0, 0, 1769792518111, 9),
        ("TestTopicPatient", 0, 3, 1769793578176, 12),
        (PERSISTENCE, 0, 0, 1769791663122, 1),
        (MATCHING, 0, 0, 1769791783399, 3),
    ]
    assert all(
        (c.leader_epoch, c.metadata, c.expire_timestamp) == (-1, "", -1) for c in group.offsets
    )
    meta = group.metadata
    assert meta is not None
    assert (meta.generation, meta.protocol, len(meta.members)) == (6, "range", 17)
    assert meta.leader == "consumer-DEVSmileCDR-8-66bebf6e-cac0-40fa-aac4-3cf0fb0cbb49"
    assignments = sorted(
        (m.client_id, decode_assignment(m.assignment).partitions)
        for m in meta.members
        if decode_assignment(m.assignment).partitions
    )
    assert assignments == [
        ("consumer-DEVSmileCDR-1", ((PERSISTENCE, 0),)),
        ("consumer-DEVSmileCDR-10", ((MATCHING, 0),)),
        ("consumer-DEVSmileCDR-14", (("TestTopicPatient", 0),)),
        ("consumer-DEVSmileCDR-16", (("Retry.TestTopicPatient", 0),)),
    ]


# -- a partition written here ----------------------------------------------------------------------

MEMBER = MemberMetadata(
    "m-1",
    "client-1",
    "/127.0.0.1",
    10000,
    b"",
    encode_assignment(ConsumerAssignment((("t", 0), ("t", 1)))),
)


class PartitionWriter:
    """Batches appended to one segment of ``__consumer_offsets-<p>`` at consecutive offsets."""

    def __init__(self, log_dir: Path, partition: int) -> None:
        self.directory = log_dir / f"__consumer_offsets-{partition}"
        self.directory.mkdir(parents=True)
        self.segment = self.directory / "00000000000000000000.log"
        self.offset = 0

    def records(
        self,
        *records: tuple[bytes, bytes | None],
        producer_id: int = -1,
        compression: CompressionType = CompressionType.NONE,
    ) -> None:
        txn = producer_id >= 0
        builder = MemoryRecordsBuilder(
            self.offset,
            compression,
            producer_id=producer_id,
            producer_epoch=0 if txn else -1,
            base_sequence=0 if txn else -1,
            is_transactional=txn,
        )
        for key, value in records:
            builder.append(self.offset, 1000 + self.offset, key, value)
            self.offset += 1
        self._write(builder.build())

    def put(self, *records: GroupRecord, **options) -> None:
        self.records(*(r.encode() for r in records), **options)

    def marker(self, producer_id: int, commit: bool) -> None:
        marker = EndTransactionMarker.commit(0) if commit else EndTransactionMarker.abort(0)
        self._write(
            marker.build_batch(
                base_offset=self.offset, timestamp=1000, producer_id=producer_id, producer_epoch=0
            )
        )
        self.offset += 1

    def _write(self, batch: bytes) -> None:
        with self.segment.open("ab") as f:
            f.write(batch)


def commit(group: str, topic: str, partition: int, offset: int | None) -> GroupRecord:
    value = None if offset is None else OffsetCommitValue(offset, f"m{offset}", 5000 + offset)
    return GroupRecord(OffsetCommitKey(group, topic, partition), value)


def metadata(group: str, members=(MEMBER,), generation: int = 1) -> GroupRecord:
    value = GroupMetadataValue("consumer", generation, "range", "m-1", members, 777)
    return GroupRecord(GroupMetadataKey(group), value)


def offsets_of(loaded, group: str) -> dict[tuple[str, int], int]:
    return {(c.topic, c.partition): c.offset for c in loaded.groups[group].offsets}


def test_replay_rules(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, 3)
    w.put(metadata("g1"), commit("g1", "t", 0, 10), commit("g1", "t", 1, 20))
    w.put(commit("g2", "t", 0, 5), producer_id=100)  # pending for producer 100
    w.put(commit("g2", "t", 1, 6), producer_id=200)  # pending for producer 200
    w.marker(100, commit=True)  # g2 t-0 = 5 committed
    w.marker(200, commit=False)  # g2 t-1 = 6 dropped
    w.put(commit("g1", "t", 1, None))  # tombstone: g1 loses t-1
    w.records((b"\x00\x05\x00\x01g", b"\x00\x00"), (b"\x00\x63", None))  # types 5 and 99
    w.put(metadata("g3"), GroupRecord(GroupMetadataKey("g3")))  # g3 created then deleted
    w.put(commit("g4", "t", 0, 1), producer_id=300)  # never ended: stays pending
    w.put(commit("g5", "t", 0, 50), producer_id=400)  # transactional, older...
    w.put(commit("g5", "t", 0, 60))  # ...than this plain commit, which wins at the COMMIT
    w.put(commit("g6", "t", 0, 70), producer_id=500)
    w.put(commit("g6", "t", 0, None), producer_id=500)  # a txn tombstone drops the pending one
    w.marker(400, commit=True)
    w.marker(500, commit=True)
    w.put(
        metadata("g1", members=(), generation=2),
        commit("g7", "u", 2, 3),
        compression=CompressionType.GZIP,
    )

    loaded = load_log_dir(LogDir(tmp_path))
    assert list(loaded.groups) == ["g1", "g2", "g4", "g5", "g7"]  # g4: pending only (Kafka too)
    assert offsets_of(loaded, "g1") == {("t", 0): 10}
    assert offsets_of(loaded, "g2") == {("t", 0): 5}
    assert offsets_of(loaded, "g5") == {("t", 0): 60}
    assert offsets_of(loaded, "g7") == {("u", 2): 3}
    g1, g2 = loaded.groups["g1"], loaded.groups["g2"]
    assert (g1.state, g1.metadata.generation, g1.coordinator_partition) == ("Empty", 2, 3)
    assert (g2.state, g2.metadata, g2.protocol_type) == ("Empty", None, "")
    assert g1.offsets[0] == CommittedOffset("t", 0, 10, -1, "m10", 5010, -1, 1)
    assert loaded.skipped == {
        "ConsumerGroupMemberMetadata (record type 5)": 1,
        "record type 99": 1,
    }
    assert loaded.pending_offsets == 1  # g4's
    g4 = loaded.groups["g4"]
    assert (g4.state, g4.offsets) == ("Empty", ())
    assert g4.pending == {300: (CommittedOffset("t", 0, 1, -1, "m1", 5001, -1, 12),)}
    assert loaded.records == 17


def test_transactional_offsets_interleaved_with_plain_commits(tmp_path: Path) -> None:
    """Kafka's ordering at a COMMIT marker: the later record of a partition wins, whichever
    kind it is; an ABORT drops only its producer's offsets; undecided ones stay pending."""
    w = PartitionWriter(tmp_path, 1)
    w.put(commit("g", "t", 0, 100))  # 0: plain
    w.put(commit("g", "t", 0, 110), commit("g", "t", 1, 210), producer_id=7)  # 1-2: txn of 7
    w.put(commit("g", "t", 1, 205))  # 3: plain, after 7's record of t-1, before 7's marker
    w.put(commit("g", "t", 2, 300), producer_id=8)  # 4: txn of 8
    w.put(commit("g", "t", 2, 301))  # 5: plain commit of t-2 while 8's is pending
    w.marker(7, commit=True)  # 6: t-0 110 (later than 100); t-1 stays 205 (later than 210's)
    w.put(commit("g", "t", 2, 320), commit("g", "t", 3, 400), producer_id=9)  # 7-8: txn of 9
    w.marker(8, commit=False)  # 9: 8's t-2 dropped, the plain 301 stays
    w.put(commit("g", "t", 0, 120), producer_id=7)  # 10: 7's next transaction, undecided
    w.marker(9, commit=True)  # 11: t-2 320, t-3 400 (later than 301)

    def load() -> dict[tuple[str, int], int]:
        return offsets_of(load_log_dir(LogDir(tmp_path)), "g")

    assert load() == {("t", 0): 110, ("t", 1): 205, ("t", 2): 320, ("t", 3): 400}
    group = load_log_dir(LogDir(tmp_path)).groups["g"]
    assert group.pending == {7: (CommittedOffset("t", 0, 120, -1, "m120", 5120, -1, 10),)}
    w.marker(7, commit=True)  # 12: written after a restart: decides the pending one
    assert load() == {("t", 0): 120, ("t", 1): 205, ("t", 2): 320, ("t", 3): 400}
    assert load_log_dir(LogDir(tmp_path)).pending_offsets == 0


def test_stable_group_with_members(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, 0)
    w.put(metadata("g"))
    group = load_log_dir(LogDir(tmp_path)).groups["g"]
    assert group.state == "Stable"
    assignment = decode_assignment(group.metadata.members[0].assignment)
    assert assignment.partitions == (("t", 0), ("t", 1))


def test_leader_change_control_batch_is_skipped(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, 0)
    builder = MemoryRecordsBuilder(0, producer_id=-1, is_control=True)
    builder.append(0, 1, ControlRecordType.LEADER_CHANGE.record_key(), b"\x00\x00")
    w._write(builder.build())
    w.offset = 1
    w.put(commit("g", "t", 0, 1))
    assert offsets_of(load_log_dir(LogDir(tmp_path)), "g") == {("t", 0): 1}


def test_corrupt_value_names_partition_and_offset(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, 7)
    w.put(commit("g", "t", 0, 1))
    w.records((GroupRecord(GroupMetadataKey("g")).encode()[0], b"\x00\x03\x00"))
    with pytest.raises(CorruptCoordinatorRecordError) as info:
        load_log_dir(LogDir(tmp_path))
    assert str(info.value) == (
        f"corrupt value of the record at topic '__consumer_offsets' partition 7 offset 1 in "
        f"{w.segment}: protocolType needs 2 bytes at byte 2 but only 1 remain"
    )


def test_crc_mismatch_is_reported(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, 1)
    w.put(commit("g", "t", 0, 1))
    data = bytearray(w.segment.read_bytes())
    data[-1] ^= 0xFF
    w.segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        load_log_dir(LogDir(tmp_path))


def test_same_group_in_two_partitions(tmp_path: Path) -> None:
    PartitionWriter(tmp_path, 1).put(commit("g", "t", 0, 1))
    PartitionWriter(tmp_path, 2).put(commit("g", "t", 0, 1))
    with pytest.raises(DuplicateGroupError, match="'g' is in partitions 1 and 2"):
        load_log_dir(LogDir(tmp_path))


def test_log_dir_without_offsets_topic(tmp_path: Path) -> None:
    (tmp_path / "topic-0").mkdir()
    loaded = load_log_dir(LogDir(tmp_path))
    assert (loaded.groups, loaded.records) == ({}, 0)
