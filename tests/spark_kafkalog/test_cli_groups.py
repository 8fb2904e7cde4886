"""``kafkalog groups list|describe --log-dir``: kafka-consumer-groups.sh's output from the
__consumer_offsets of Kafka 3.7's log dir and of a log dir written here (members holding several
partitions, unassigned commits, lag against the log end offset, empty groups, other protocols)."""

from __future__ import annotations

from pathlib import Path

from broker_embedded.coordinator.consumer_protocol import ConsumerAssignment, encode_assignment
from broker_embedded.coordinator.group_metadata_record import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
)
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from tests.broker_embedded.coordinator._offsets_fixture import copy_log_dir
from tests.broker_embedded.coordinator.test_group_metadata_loader import (
    PartitionWriter,
    commit,
)

FIXTURE_DESCRIBE = """
GROUP           TOPIC                                         PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                                                  HOST            CLIENT-ID
DEVSmileCDR     subscription.matching.SHR_PROD.persistence    0          0               -               -               consumer-DEVSmileCDR-10-399102ad-1370-46bf-a716-1284532fee38 /172.18.0.5     consumer-DEVSmileCDR-10
DEVSmileCDR     TestTopicPatient                              0          3               3               0               consumer-DEVSmileCDR-14-9988674a-a7c5-4c0f-b939-59e81f962eea /172.18.0.5     consumer-DEVSmileCDR-14
DEVSmileCDR     batch2.work.notification.SHR_PROD.persistence 0          0               -               -               consumer-DEVSmileCDR-1-88570c7a-482e-45c7-800a-726fe3e294ce  /172.18.0.5     consumer-DEVSmileCDR-1
DEVSmileCDR     Retry.TestTopicPatient                        0          0               -               -               consumer-DEVSmileCDR-16-55070d40-2de4-4754-89a0-23021dc3271f /172.18.0.5     consumer-DEVSmileCDR-16
"""  # noqa: E501


def test_fixture_list(cli, tmp_path: Path) -> None:
    assert cli("groups list --log-dir", copy_log_dir(tmp_path)) == (0, "DEVSmileCDR\n", "")


def test_fixture_describe(cli, tmp_path: Path) -> None:
    """Only TestTopicPatient-0 is in the log dir (3 records): the others have no log end."""
    log_dir = copy_log_dir(tmp_path)
    assert cli("groups describe --log-dir", log_dir) == (0, FIXTURE_DESCRIBE, "")
    assert cli("groups describe --group DEVSmileCDR --log-dir", log_dir) == (0, FIXTURE_DESCRIBE,
                                                                            "")  # fmt: skip


def test_unknown_group(cli, tmp_path: Path) -> None:
    log_dir = copy_log_dir(tmp_path)
    code, out, err = cli("groups describe --group nope --group DEVSmileCDR --log-dir", log_dir)
    assert (code, out) == (1, "")
    assert err == (
        f"kafkalog groups describe: consumer group 'nope' does not exist in log dir {log_dir} "
        f"(groups: DEVSmileCDR)\n"
    )


def test_not_a_log_dir(cli, tmp_path: Path) -> None:
    code, out, err = cli("groups list --log-dir", tmp_path / "missing")
    assert (code, out) == (1, "")
    assert err.startswith(f"kafkalog groups list: log dir {tmp_path / 'missing'} does not exist")


def test_log_dir_or_bootstrap_server_is_required(cli) -> None:
    code, out, err = cli("groups list")
    assert (code, out) == (2, "")
    assert err == (
        "kafkalog groups list: exactly one of --log-dir and --bootstrap-server is required\n"
    )


# -- a log dir written here ------------------------------------------------------------------------


def member(n: int, *partitions: tuple[str, int]) -> MemberMetadata:
    assignment = encode_assignment(ConsumerAssignment(partitions))
    return MemberMetadata(f"member-{n}", f"client-{n}", f"/10.0.0.{n}", 10000, b"", assignment)


def write_topic(log_dir: Path, topic: str, partition: int, records: int) -> None:
    directory = log_dir / f"{topic}-{partition}"
    directory.mkdir(parents=True)
    builder = MemoryRecordsBuilder(0)
    for i in range(records):
        builder.append(i, 1000 + i, None, b"v")
    (directory / "00000000000000000000.log").write_bytes(builder.build())


def group_metadata(group: str, protocol_type: str, *members: MemberMetadata) -> GroupRecord:
    leader = members[0].member_id if members else None
    value = GroupMetadataValue(protocol_type, 3, "range" if members else None, leader, members)
    return GroupRecord(GroupMetadataKey(group), value)


def written_log_dir(tmp_path: Path) -> Path:
    log_dir = tmp_path / "logs"
    write_topic(log_dir, "orders", 0, 10)
    write_topic(log_dir, "orders", 1, 4)
    write_topic(log_dir, "orders", 2, 0)
    w = PartitionWriter(log_dir, 0)
    w.put(
        group_metadata("app", "consumer", member(1, ("orders", 2)),
                       member(2, ("orders", 1), ("orders", 0)), member(3)),
        commit("app", "orders", 0, 7), commit("app", "orders", 1, 4),
        commit("app", "gone", 5, 12),  # no member holds it, no such partition here
        group_metadata("connect-cluster", "connect", member(4)),
        commit("offsets-only", "orders", 0, 9),
        group_metadata("idle", "consumer"),
    )  # fmt: skip
    return log_dir


WRITTEN_DESCRIBE = """
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
app             orders          0          7               10              3               member-2        /10.0.0.2       client-2
app             orders          1          4               4               0               member-2        /10.0.0.2       client-2
app             orders          2          -               0               -               member-1        /10.0.0.1       client-1
app             gone            5          12              -               -               -               -               -

GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
offsets-only    orders          0          9               10              1               -               -               -
"""  # noqa: E501


def test_written_list_skips_other_protocols(cli, tmp_path: Path) -> None:
    assert cli("groups list --log-dir", written_log_dir(tmp_path)) == (
        0, "app\nidle\noffsets-only\n", "")  # fmt: skip


def test_written_describe(cli, tmp_path: Path) -> None:
    code, out, err = cli("groups describe --log-dir", written_log_dir(tmp_path))
    assert (code, out) == (0, WRITTEN_DESCRIBE)
    assert err == (
        "\nConsumer group 'idle' has no active members.\n"
        "\nConsumer group 'offsets-only' has no active members.\n"
    )
