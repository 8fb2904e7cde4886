"""``kafkalog groups``: list and describe the groups of a cluster (Kafka's ``kafka-groups.sh
--list`` and ``kafka-consumer-groups.sh --describe``), read straight from a log dir's
``__consumer_offsets`` partitions (``--log-dir``) or asked of a running server
(``--bootstrap-server``). Every group is shown, whatever its protocol type: consumer groups,
and the groups of Kafka Connect (``connect``), Schema Registry (``sr``) or any other client of
the group protocol (Kafka 3.9's ``kafka-consumer-groups.sh`` lists only consumer groups and
refuses to describe the others; Kafka 4's ``kafka-groups.sh --list`` lists every group).

Over the wire (:func:`run_on_server`, the project's wire client), as Kafka's tool asks: the
groups are ListGroups' answers of every broker (each lists those it coordinates); per group,
DescribeGroups (its state and live members) and OffsetFetch (every committed partition) on its
coordinator (FindCoordinator, asked again on NOT_COORDINATOR), and ListOffsets (latest: the
high watermark) on each partition's leader (``-`` for a partition that does not exist). The
output is the one described below for the same state (members, commits, high watermarks), so
both sources print the same bytes for a server and its log dir after a clean shutdown.

Reading: every ``__consumer_offsets-N`` partition directory of the log dir is replayed from its
log start to its log end offset (broker_embedded/coordinator/group_metadata_loader.py: Kafka's
loader rules, batch by batch); nothing is written and no lock is taken, so this works on a log
dir copied from Kafka and while a broker owns the dir (it sees what is on disk). A group's
members are those of its last group metadata record: a group whose consumers died without
leaving still shows them (a coordinator would expire them after their session timeout).

Output (stdout), as kafka-consumer-groups.sh prints it:

- ``list``: every group, one id a line, sorted.
- ``describe``: per group (``--group G``, repeatable; default every group, sorted). A group of
  another protocol type than ``consumer`` (or none: groups that only commit offsets) first
  prints a blank line, the header ``GROUP PROTOCOL-TYPE PROTOCOL STATE #MEMBERS`` and its row
  (GROUP padded to the longest id, at least 15, the others to 15; PROTOCOL ``-`` when none),
  then its committed offsets as below, with no member (its members' assignments are not the
  consumer protocol's). A consumer group prints, as kafka-consumer-groups.sh does, a blank
  line, the header ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
  CLIENT-ID`` and one row per partition: first the partitions assigned to members (members
  with more partitions first, in the group record's member order on ties; a member's partitions
  by topic, then partition), then the partitions with a committed offset that no member holds
  (consumer columns ``-``). CURRENT-OFFSET is the committed offset (``-`` when none);
  LOG-END-OFFSET the partition's high watermark in the same log dir (what Kafka's tool gets
  from ListOffsets; ``-`` when the log dir does not hold the partition); LAG their difference
  (``-`` when either is missing). Columns are padded as Kafka pads them (GROUP, TOPIC,
  CONSUMER-ID and HOST to the longest value, at least 15; PARTITION 10; the offsets 15). A
  group with no members prints ``Consumer group 'G' has no active members.`` on stderr first,
  as Kafka does, and nothing on stdout when it has no committed offsets either.

Errors (:class:`~spark_kafkalog.topics_command.CommandError`, exit status 1): a group that does
not exist in the log dir or cluster (named, with the groups there); a path that is not a log
dir; corrupt records (named by partition and offset). Memory: the groups of the log dir (one
batch at a time is read); one partition view is open at a time while log end offsets are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from broker_embedded.coordinator.consumer_protocol import decode_assignment
from broker_embedded.coordinator.group_metadata_loader import LoadedGroup, load_log_dir
from broker_embedded.errors import KafkaApiError
from broker_embedded.protocol.message_codec import MessageFormatError
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.topic_partition import TopicPartition
from spark_kafkalog.topics_command import CommandError, require_log_dir

MISSING = "-"
CONSUMER_PROTOCOL_TYPES = ("consumer", "")
LogEndOffset = Callable[[str, int], "int | None"]
HEADER = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
GROUP_HEADER = ("GROUP", "PROTOCOL-TYPE", "PROTOCOL", "STATE", "#MEMBERS")


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One row of ``describe`` (Kafka's ``PartitionAssignmentState``)."""

    group: str
    topic: str
    partition: int
    offset: int | None
    log_end_offset: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset

    def cells(self) -> tuple[str, ...]:
        def text(v: int | None) -> str:
            return MISSING if v is None else str(v)

        return (
            self.group,
            self.topic,
            str(self.partition),
            text(self.offset),
            text(self.log_end_offset),
            text(self.lag),
            self.consumer_id,
            self.host,
            self.client_id,
        )


@dataclass(frozen=True, slots=True)
class MemberView:
    """A member as ``describe`` shows it."""

    member_id: str
    client_host: str
    client_id: str
    assignment: bytes  # ConsumerProtocolAssignment


@dataclass(frozen=True)
class GroupView:
    """A group as ``describe`` shows it, read from a log dir or from a server."""

    group_id: str
    state: str
    members: tuple[MemberView, ...]
    offsets: Mapping[tuple[str, int], int]  # committed offset by (topic, partition)
    protocol_type: str = "consumer"
    protocol: str = ""  # the protocol chosen, "" when none

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type in CONSUMER_PROTOCOL_TYPES


def view_of(group: LoadedGroup) -> GroupView:
    """A group loaded from a log dir (its members: those of its last metadata record)."""
    members = (
        ()
        if group.metadata is None
        else tuple(
            MemberView(m.member_id, m.client_host, m.client_id, m.assignment)
            for m in group.metadata.members
        )
    )
    offsets = {(c.topic, c.partition): c.offset for c in group.offsets}
    protocol = "" if group.metadata is None else group.metadata.protocol or ""
    return GroupView(group.group_id, group.state, members, offsets, group.protocol_type, protocol)


class LogEndOffsets:
    """High watermarks of a log dir's partitions, each read once."""

    def __init__(self, log_dir: LogDir) -> None:
        self.log_dir = log_dir
        self.cache: dict[TopicPartition, int | None] = {}

    def __call__(self, topic: str, partition: int) -> int | None:
        tp = TopicPartition(topic, partition)
        if tp not in self.cache:
            self.cache[tp] = None
            if self.log_dir.partition_dir(tp).is_dir():
                with self.log_dir.open_partition(tp) as reader:
                    self.cache[tp] = reader.high_watermark
        return self.cache[tp]


def _assigned(group: GroupView, member: MemberView) -> list[tuple[str, int]]:
    try:
        return sorted(decode_assignment(member.assignment).partitions)
    except MessageFormatError as e:
        raise CommandError(
            f"group {group.group_id!r} member {member.member_id!r}: its assignment is not the "
            f"consumer protocol's ({e})"
        ) from None


def offset_rows(group: GroupView, log_end_offset: LogEndOffset) -> list[OffsetRow]:
    """The rows of one group (see the module docstring for their order)."""
    committed = group.offsets
    members = group.members if group.is_consumer_group else ()
    assignments = [(m, _assigned(group, m)) for m in members]
    assignments = [(m, tps) for m, tps in assignments if tps]
    assignments.sort(key=lambda item: -len(item[1]))  # stable: record order on ties
    rows = []
    held = set()
    for member, tps in assignments:
        for topic, p in tps:
            held.add((topic, p))
            rows.append(
                OffsetRow(
                    group.group_id,
                    topic,
                    p,
                    committed.get((topic, p)),
                    log_end_offset(topic, p),
                    member.member_id,
                    member.client_host,
                    member.client_id,
                )
            )
    for (topic, p), offset in sorted(committed.items()):
        if (topic, p) not in held:
            rows.append(OffsetRow(group.group_id, topic, p, offset, log_end_offset(topic, p)))
    return rows


def format_rows(rows: Sequence[OffsetRow]) -> str:
    """Kafka's ``printOffsets`` block: a newline before the header and each row, one after."""
    width = [15, 15, 10, 15, 15, 15, 15, 15]
    for row in rows:
        for i in (0, 1, 6, 7):
            width[i] = max(width[i], len(row.cells()[i]))
    return _table([HEADER, *(r.cells() for r in rows)], width)


def _table(lines: Sequence[Sequence[str]], width: Sequence[int]) -> str:
    """Kafka's tables: a newline before each line, every cell but the last padded, one after."""
    text = "".join(
        "\n"
        + " ".join(c.ljust(w) for c, w in zip(cells[:-1], width, strict=True))
        + " "
        + cells[-1]
        for cells in lines
    )
    return text + "\n"


def format_group(group: GroupView) -> str:
    """The block of a group of another protocol type (module docstring)."""
    row = (
        group.group_id,
        group.protocol_type,
        group.protocol or MISSING,
        group.state,
        str(len(group.members)),
    )
    return _table((GROUP_HEADER, row), (max(15, len(group.group_id)), 15, 15, 15))


def describe(
    groups: Iterable[GroupView], log_end_offset: LogEndOffset, out: TextIO, err: TextIO
) -> None:
    for group in groups:
        if not group.is_consumer_group:
            out.write(format_group(group))
        elif group.state == "Empty":
            err.write(f"\nConsumer group '{group.group_id}' has no active members.\n")
        rows = offset_rows(group, log_end_offset)
        if rows:
            out.write(format_rows(rows))


def _check_known(groups: Sequence[str], known: Sequence[str], where: str) -> list[str]:
    """The groups to describe: ``groups`` (deduplicated) or every known one."""
    missing = [g for g in groups if g not in known]
    if missing:
        raise CommandError(
            f"group {missing[0]!r} does not exist in {where} (groups: {', '.join(known) or 'none'})"
        )
    return list(dict.fromkeys(groups)) or list(known)


def run(
    action: str,
    log_dir_path: Path | None,
    out: TextIO,
    err: TextIO,
    groups: Sequence[str] = (),
    bootstrap: str | None = None,
    client_config: Any = None,
) -> int:
    """``groups list`` or ``groups describe [--group G ...]`` on a log dir or, with
    ``bootstrap``, on a running server; return 0."""
    if bootstrap is not None:
        return run_on_server(action, bootstrap, out, err, groups, client_config)
    assert log_dir_path is not None
    require_log_dir(log_dir_path)
    log_dir = LogDir(log_dir_path)
    loaded = load_log_dir(log_dir).groups
    known = sorted(loaded)
    if action == "list":
        out.write("".join(f"{g}\n" for g in known))
        return 0
    wanted = _check_known(groups, known, f"log dir {log_dir_path}")
    describe([view_of(loaded[g]) for g in wanted], LogEndOffsets(log_dir), out, err)
    out.flush()
    return 0


def run_on_server(
    action: str,
    bootstrap: str,
    out: TextIO,
    err: TextIO,
    groups: Sequence[str] = (),
    client_config: Any = None,
) -> int:
    """The same over the wire: ListGroups of every broker, then DescribeGroups and OffsetFetch
    on each group's coordinator and ListOffsets (latest) on each partition's leader."""
    from broker_embedded.client.broker_connection import ClientConfig
    from broker_embedded.client.kafka_client import LATEST, KafkaClient

    with KafkaClient(bootstrap, client_config or ClientConfig()) as client:
        known = sorted(g.group_id for g in client.list_groups())
        if action == "list":
            out.write("".join(f"{g}\n" for g in known))
            return 0
        views = []
        for group_id in _check_known(groups, known, f"the cluster at {bootstrap}"):
            d = client.describe_group(group_id)
            members = tuple(
                MemberView(m.member_id, m.client_host, m.client_id, m.assignment) for m in d.members
            )
            offsets = client.committed_offsets(group_id)
            views.append(
                GroupView(group_id, d.state, members, offsets, d.protocol_type, d.protocol)
            )
        ends: dict[tuple[str, int], int | None] = {}

        def log_end_offset(topic: str, partition: int) -> int | None:
            if (topic, partition) not in ends:
                try:
                    ends[(topic, partition)] = client.list_offset(topic, partition, LATEST)
                except KafkaApiError:
                    ends[(topic, partition)] = None
            return ends[(topic, partition)]

        describe(views, log_end_offset, out, err)
    out.flush()
    return 0
