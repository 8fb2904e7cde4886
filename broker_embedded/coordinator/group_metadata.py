"""A classic consumer group's state (Kafka's ``GroupMetadata`` and ``MemberMetadata``), and the
frozen values the coordinator hands out (join and sync results, summaries, committed offsets,
and :class:`GroupSnapshot`, what Kafka writes as a group metadata record).

States and transitions (Kafka's ``GroupState``; a transition from any other state is a bug and
raises ``AssertionError``)::

    Empty ---------------> PreparingRebalance <-- Stable, CompletingRebalance
    PreparingRebalance --> CompletingRebalance (members joined) or Empty (none left)
    CompletingRebalance -> Stable (the leader's SyncGroup)
    Empty, PreparingRebalance, CompletingRebalance, Stable -> Dead (deleted or unloaded)

Invariants:
- ``generation_id`` grows by one each time a rebalance completes (to CompletingRebalance or to
  Empty); a member's requests name the generation they joined.
- ``protocol_type`` is the first member's and every member has it; ``protocol_name`` is chosen
  when the generation starts: among the protocols every member supports, the one most members
  list first (their vote; ties go to the earliest member).
- ``leader_id`` is a member (or None when there is none); ``static_members`` maps each
  group.instance.id to the one member id that holds it.
- ``pending_members`` are member ids handed out with MEMBER_ID_REQUIRED (JoinGroup v4+) that
  have not joined yet; ``pending_sync`` the members of this generation whose SyncGroup has not
  arrived.
- ``num_awaiting_join`` counts the members whose JoinGroup waits for the rebalance (their
  ``awaiting_join`` callback is set).

Member ids are ``<client id>-<uuid4>`` (``<group.instance.id>-<uuid4>`` for static members).

Thread safety: a :class:`GroupMetadata` and its members are mutable and guarded by the group's
``lock`` (an ``RLock``, also the lock of the group's delayed operations); callers hold it for
every read and write. The frozen values are immutable.
"""

from __future__ import annotations

import enum
import logging
import struct
import threading
import time
import typing
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker_embedded.errors import KafkaApiError

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


class GroupState(enum.Enum):
    """Kafka's classic group states; ``value`` is the name Kafka shows (ListGroups, Describe)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(set(GroupState)),
}


@dataclass(frozen=True, slots=True)
class Protocol:
    """One protocol a member supports: its name ("range") and metadata (the subscription)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset, as Kafka's offset commit value holds it. ``record_offset``: where its
    record sits in ``__consumer_offsets`` (-1: not stored yet); of two commits of a partition
    the later record wins (Kafka's ``olderThan``); not part of the value (equality ignores it).
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None
    record_offset: int = field(default=-1, compare=False, repr=False)


def _committed_at(o: OffsetAndMetadata) -> int:
    return o.commit_timestamp_ms


class _Recorded(typing.Protocol):
    @property
    def record_offset(self) -> int: ...


_K = typing.TypeVar("_K")
_R = typing.TypeVar("_R", bound=_Recorded)


def commit_later(committed: dict[_K, _R], pending: typing.Mapping[_K, _R]) -> int:
    """Kafka's COMMIT of a producer's pending transactional offsets (``olderThan``): each
    replaces the committed one of its partition unless that one's record is later; how many
    partitions had no commit before."""
    added = 0
    for key, value in pending.items():
        current = committed.get(key)
        if current is None or current.record_offset < value.record_offset:
            added += current is None
            committed[key] = value
    return added


@dataclass(frozen=True, slots=True)
class JoinMember:
    """A member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup is answered with."""

    member_id: str
    error: KafkaApiError | None = None
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a SyncGroup is answered with."""

    error: KafkaApiError | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """A member as Kafka's group metadata value (v3) holds it and DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the metadata of the group's protocol (empty when none is chosen)
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group as Kafka's group metadata record stores it (key: the group id; value v3)."""

    group_id: str
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]
    state: GroupState = GroupState.EMPTY


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """A group as ListGroups lists it."""

    group_id: str
    protocol_type: str
    state: GroupState
    group_type: str = "Classic"


class MemberMetadata:
    """One member of a group (guarded by its group's lock)."""

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[Protocol],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols: tuple[Protocol, ...] = tuple(protocols)
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_new = False
        self.heartbeat_satisfied = False

    def __repr__(self) -> str:
        return f"member {self.member_id!r} (instance {self.group_instance_id!r})"

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        raise AssertionError(f"{self!r} does not support protocol {protocol!r}")

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule: a new member needs a heartbeat (its first join); a member awaiting a
        join or sync response counts as alive; any other member needs its next heartbeat."""
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True
        return self.heartbeat_satisfied

    def matches(self, protocols: Sequence[Protocol]) -> bool:
        return self.protocols == tuple(protocols)

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols among ``candidates``."""
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise AssertionError(f"{self!r} supports none of {sorted(candidates)}")

    def snapshot(self, protocol: str | None, with_metadata: bool = True) -> MemberSnapshot:
        return MemberSnapshot(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.metadata(protocol) if with_metadata and protocol is not None else b"",
            self.assignment if with_metadata else b"",
        )


def new_member_id(client_id: str, group_instance_id: str | None) -> str:
    """Kafka's member id: ``<client id or group.instance.id>-<uuid4>``."""
    return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class GroupMetadata:
    """One classic group (module docstring); every access under :attr:`lock`."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    state_timestamp_ms: int = field(default_factory=now_ms)
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync: set[str] = field(default_factory=set)
    num_awaiting_join: int = 0
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # TxnOffsetCommit's offsets by producer id, written but undecided until the marker
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(
        default_factory=dict
    )
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # -- transactional offsets -------------------------------------------------------------

    def has_pending_txn_offset(self, tp: tuple[str, int]) -> bool:
        """Whether a transaction's offset of ``tp`` awaits its marker (Kafka's
        ``hasPendingOffsetCommitsForTopicPartition``)."""
        return any(tp in pending for pending in self.pending_txn_offsets.values())

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> int:
        """The producer's marker: its pending offsets become the committed ones (``commit``;
        each unless a later record committed that partition) or are dropped; how many."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if commit:
            commit_later(self.offsets, pending)
        return len(pending)

    def expired_offsets(self, now: int, retention_ms: int) -> list[tuple[str, int]]:
        """The committed partitions whose retention has passed at ``now`` (Kafka's
        ``removeExpiredOffsets``, KIP-211), sorted: an Empty group's (with a protocol type)
        counted from when it became Empty; a Stable consumer group's of topics no member
        subscribes to, from their commit; a group without a protocol type (commits only), from
        their commit; none otherwise. An offset with an expire timestamp (commit v1) expires
        then instead."""
        base: Callable[[OffsetAndMetadata], int]
        subscribed: frozenset[str] = frozenset()
        if self.protocol_type is None:
            base = _committed_at
        elif self.state is GroupState.EMPTY:
            base = lambda _: self.state_timestamp_ms  # noqa: E731
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            base, subscribed = _committed_at, self.subscribed_topics
        else:
            return []
        return sorted(
            tp
            for tp, o in self.offsets.items()
            if tp[0] not in subscribed
            and (
                now - base(o) >= retention_ms
                if o.expire_timestamp_ms is None
                else now >= o.expire_timestamp_ms
            )
        )

    # -- state -----------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _PREVIOUS[state]:
            raise AssertionError(
                f"group {self.group_id!r}: no transition from {self.state.value} to {state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in _PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    # -- members ---------------------------------------------------------------------------

    def add(self, member: MemberMetadata, callback: JoinCallback | None) -> None:
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members, member
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = callback
        if callback is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.awaiting_join is not None:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[Protocol],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        member.protocols = tuple(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and member.awaiting_join is None:
            self.num_awaiting_join += 1
        elif callback is None and member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = callback

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str, fenced: KafkaApiError
    ) -> MemberMetadata:
        """Give ``instance_id``'s member the new id; the old id's waiting join and sync are
        answered with ``fenced`` (FENCED_INSTANCE_ID)."""
        member = self.members.pop(old_member_id)
        self.invoke_join(member, JoinResult(old_member_id, fenced))
        self.invoke_sync(member, SyncResult(fenced))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else any member that did; ``False`` if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join is not None:
            return True
        joined = next((m for m in self.members.values() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    def invoke_join(self, member: MemberMetadata, result: JoinResult) -> None:
        callback = member.awaiting_join
        if callback is None:
            return
        member.awaiting_join = None
        self.num_awaiting_join -= 1
        _call(callback, result, member)

    def invoke_sync(self, member: MemberMetadata, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        _call(callback, result, member)
        return True

    # -- protocols ---------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {p.name for p in members[0].protocols}
        for m in members[1:]:
            common &= {p.name for p in m.protocols}
        return common

    def select_protocol(self) -> str:
        """The protocol most members vote for among those all support (ties: first voter)."""
        assert self.members, f"group {self.group_id!r}: no members to select a protocol"
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync.clear()

    def _subscribed_topics(self) -> frozenset[str] | None:
        """The topics of every member's consumer-protocol subscription (None: unknown)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        topics: set[str] = set()
        try:
            for m in self.members.values():
                assert self.protocol_name is not None
                topics |= subscription_topics(m.metadata(self.protocol_name))
        except (struct.error, UnicodeDecodeError, ValueError):
            log.warning("group %r: a subscription does not parse; topics unknown", self.group_id)
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # -- views -------------------------------------------------------------------------------

    def join_members(self) -> tuple[JoinMember, ...]:
        assert self.protocol_name is not None
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def snapshot(self) -> GroupSnapshot:
        """The group as its metadata record stores it (every member with its subscription
        and assignment)."""
        return GroupSnapshot(
            self.group_id,
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms,
            tuple(m.snapshot(self.protocol_name) for m in self.members.values()),
            self.state,
        )

    def summary(self) -> GroupSnapshot:
        """DescribeGroups' view: a Stable group's members with subscription and assignment,
        any other state's without (and with no protocol name), as Kafka shows them."""
        if self.is_(GroupState.STABLE):
            return self.snapshot()
        return GroupSnapshot(
            self.group_id,
            self.protocol_type or "",
            self.generation_id,
            None,
            self.leader_id,
            self.state_timestamp_ms,
            tuple(m.snapshot(None, with_metadata=False) for m in self.members.values()),
            self.state,
        )

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state)


def _call(callback: Callable[[object], None], result: object, member: MemberMetadata) -> None:
    try:
        callback(result)
    except Exception:  # a response that cannot be sent must not break the group's state
        log.exception("answering %r failed", member)


def subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a consumer-protocol subscription (Kafka's ``ConsumerProtocolSubscription``,
    any version: int16 version, then an int32 count of int16-length UTF-8 topic names)."""
    (count,) = struct.unpack_from(">i", metadata, 2)
    if count < 0 or count > len(metadata):
        raise ValueError(f"subscription topic count {count} in {len(metadata)} bytes")
    pos, topics = 6, set()
    for _ in range(count):
        (n,) = struct.unpack_from(">h", metadata, pos)
        if n < 0 or pos + 2 + n > len(metadata):
            raise ValueError(f"subscription topic name of {n} bytes at {pos}")
        topics.add(metadata[pos + 2 : pos + 2 + n].decode("utf-8"))
        pos += 2 + n
    return topics
