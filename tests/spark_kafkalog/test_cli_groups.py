"""``kafkalog groups list|describe --log-dir``: kafka-consumer-groups.sh's output from the
__consumer_offsets of Kafka 3.7's log dir and of a log dir written here (members holding several
partitions, unassigned commits, lag against the log end offset, empty groups, other protocols);
the groups of other protocol types (Kafka Connect's, Schema Registry's) in a log dir Kafka 3.9
wrote, and over the wire from a server where such a group joined."""

from __future__ import annotations

import dataclasses
import shutil
import time
from datetime import timedelta
from pathlib import Path

from kio.schema.join_group.v5 import request as jg
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

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
from tests.broker_embedded.server._serve import served
from tests.broker_embedded.server.test_authorization_matrix import call
from tests.broker_embedded.server.test_security import Wire

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
    assert cli("groups describe --group DEVSmileCDR --log-dir", log_dir) == (
        0,
        FIXTURE_DESCRIBE,
        "",
    )


def test_unknown_group(cli, tmp_path: Path) -> None:
    log_dir = copy_log_dir(tmp_path)
    code, out, err = cli("groups describe --group nope --group DEVSmileCDR --log-dir", log_dir)
    assert (code, out) == (1, "")
    assert err == (
        f"kafkalog groups describe: group 'nope' does not exist in log dir {log_dir} "
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
        group_metadata(
            "app",
            "consumer",
            member(1, ("orders", 2)),
            member(2, ("orders", 1), ("orders", 0)),
            member(3),
        ),
        commit("app", "orders", 0, 7),
        commit("app", "orders", 1, 4),
        commit("app", "gone", 5, 12),  # no member holds it, no such partition here
        group_metadata("connect-cluster", "connect", member(4)),
        commit("offsets-only", "orders", 0, 9),
        group_metadata("idle", "consumer"),
    )
    return log_dir


WRITTEN_DESCRIBE = """
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
app             orders          0          7               10              3               member-2        /10.0.0.2       client-2
app             orders          1          4               4               0               member-2        /10.0.0.2       client-2
app             orders          2          -               0               -               member-1        /10.0.0.1       client-1
app             gone            5          12              -               -               -               -               -

GROUP           PROTOCOL-TYPE   PROTOCOL        STATE           #MEMBERS
connect-cluster connect         range           Stable          1

GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
offsets-only    orders          0          9               10              1               -               -               -
"""  # noqa: E501


def test_written_list_shows_every_protocol(cli, tmp_path: Path) -> None:
    assert cli("groups list --log-dir", written_log_dir(tmp_path)) == (
        0,
        "app\nconnect-cluster\nidle\noffsets-only\n",
        "",
    )


def test_written_describe(cli, tmp_path: Path) -> None:
    code, out, err = cli("groups describe --log-dir", written_log_dir(tmp_path))
    assert (code, out) == (0, WRITTEN_DESCRIBE)
    assert err == (
        "\nConsumer group 'idle' has no active members.\n"
        "\nConsumer group 'offsets-only' has no active members.\n"
    )


# -- groups of other protocol types, from Kafka 3.9 and over the wire ------------------------------

KAFKA_39 = Path(__file__).parent / "data" / "kafka-3.9-other-protocols"  # PROVENANCE.md there
KAFKA_39_DESCRIBE = """
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
app             orders          0          3               3               0               -               -               -

GROUP           PROTOCOL-TYPE   PROTOCOL        STATE           #MEMBERS
connect-group   connect         sessioned       Stable          1

GROUP           PROTOCOL-TYPE   PROTOCOL        STATE           #MEMBERS
schema-registry sr              v0              Stable          1
"""  # noqa: E501


def kafka_39_log_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(KAFKA_39, tmp_path / "logs"))


def test_kafka_39_list_shows_connect_and_schema_registry_groups(cli, tmp_path: Path) -> None:
    assert cli("groups list --log-dir", kafka_39_log_dir(tmp_path)) == (
        0,
        "app\nconnect-group\nschema-registry\n",
        "",
    )


def test_kafka_39_describe_shows_the_protocol_type(cli, tmp_path: Path) -> None:
    log_dir = kafka_39_log_dir(tmp_path)
    assert cli("groups describe --log-dir", log_dir) == (
        0,
        KAFKA_39_DESCRIBE,
        "\nConsumer group 'app' has no active members.\n",
    )
    connect = KAFKA_39_DESCRIBE.split("\n\n")[1]
    assert cli("groups describe --group connect-group --log-dir", log_dir) == (
        0,
        f"\n{connect}\n",
        "",
    )


def join(port: int, group: str, protocol_type: str, protocol: str) -> None:
    """One member joins ``group`` with raw JoinGroup v5 / SyncGroup v3 (as a Connect worker
    or Schema Registry does; their metadata bytes are opaque to the broker)."""
    wire = Wire(port)
    request = jg.JoinGroupRequest(
        group_id=group,
        session_timeout=timedelta(seconds=30),
        rebalance_timeout=timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type=protocol_type,
        protocols=(jg.JoinGroupRequestProtocol(name=protocol, metadata=b"\x00\x01worker"),),
    )
    deadline = time.monotonic() + 60
    joined = call(wire, request)
    while joined.error_code != 79 and time.monotonic() < deadline:  # coordinator loading
        time.sleep(0.2)
        joined = call(wire, request)
    assert joined.error_code == 79  # MEMBER_ID_REQUIRED: join again with the id given
    joined = call(wire, dataclasses.replace(request, member_id=joined.member_id))
    assert joined.error_code == 0
    synced = call(
        wire,
        SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            assignments=(
                SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"\x00\x01tasks"),
            ),
        ),
    )
    assert synced.error_code == 0


def test_over_the_wire_the_same_as_from_the_log_dir(cli, tmp_path: Path) -> None:
    """``--bootstrap-server`` on a server where a Connect group joined, then ``--log-dir`` on
    its log dir after shutdown: the same output."""
    log_dir = tmp_path / "logs"
    commands = [("list",), ("describe",), ("describe", "--group", "connect-cluster")]
    with served(log_dir) as server:
        join(server.server.endpoints[0].port, "connect-cluster", "connect", "sessioned")
        wire = [cli("groups", *c, "--bootstrap-server", server.bootstrap) for c in commands]
    local = [cli("groups", *c, "--log-dir", log_dir) for c in commands]
    assert wire == local
    assert wire[0] == (0, "connect-cluster\n", "")
    assert wire[2] == (
        0,
        (
            "\nGROUP           PROTOCOL-TYPE   PROTOCOL        STATE           #MEMBERS"
            "\nconnect-cluster connect         sessioned       Stable          1\n"
        ),
        "",
    )
