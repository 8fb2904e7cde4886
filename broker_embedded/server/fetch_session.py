"""Incremental fetch sessions (KIP-227, Fetch v7+): Kafka's ``FetchSession``, ``FetchSessionCache``,
the four fetch contexts and ``FetchManager``.

A consumer or follower that fetches many partitions can open a session on the broker; the broker
then remembers the partitions and their fetch parameters, the client sends only what changed, and
the broker answers only for partitions with something new (KIP-227).

Request kinds, by the request's ``(session_id, epoch)`` (:class:`FetchMetadata`):

================  ==========  ===============================================================
session id        epoch       meaning
================  ==========  ===============================================================
0                 -1          sessionless full fetch (also every Fetch < v7): no session
0                 0           full fetch that asks for a new session
X != 0            0           full fetch: close session X, then ask for a new session
X != 0            -1          full fetch: close session X, no new session (sessionless)
X                 n > 0       incremental fetch in session X at epoch n
================  ==========  ===============================================================

Any other pair is "incremental" too and ends in an error: an unknown ``X`` (0 included) gets
FETCH_SESSION_ID_NOT_FOUND (70), a known ``X`` with another epoch than the session expects gets
INVALID_FETCH_SESSION_EPOCH (71). A new session starts at epoch 1; each incremental fetch must
carry the session's epoch, which then advances (``Int.MAX_VALUE`` wraps to 1, never to 0 or -1:
:func:`next_epoch`). A session created by a request of version >= 13 keys its partitions by topic
id, an older one by topic name; continuing it with a request on the other side of v13 gets
FETCH_SESSION_TOPIC_ID_ERROR (106). With topic ids, a partition whose id the broker does not know
has no name (``topic=None``); the server answers it with UNKNOWN_TOPIC_ID and the session resolves
the name on a later fetch once the broker knows the id.

An incremental request's partitions are added to the session or update their cached request
parameters; its forgotten topics leave the session; when the session ends up empty it is closed
and the fetch is answered sessionless. The partitions to read are then the session's whole set, in
session order; a partition whose response carried records moves to the end of that order, so the
next read starts with the others (fair use of the response's byte budget).

A full response contains every partition; an incremental response only those that must be sent
(Kafka's ``CachedPartition.maybeUpdateResponseData``): records (size > 0), a high watermark or a
log start offset different from the cached one, a preferred read replica, an error (which also
resets the cached high watermark to -1, so the partition is sent again once the error is gone), or
a diverging epoch. The last stable offset is not compared, as in Kafka: the LSO never passes the
high watermark, so when it moves the consumer either sees the HW move or can read new records.

The cache (:class:`FetchSessionCache`) holds at most ``max_entries`` sessions
(``max.incremental.fetch.session.cache.slots``, default 1000; 0 disables sessions). When it is
full, a new session may take the slot of an existing one (Kafka's ``tryEvict``):

1. the least recently used session (smallest ``(last_used_ms, id)``) goes if it is stale: unused
   for more than ``eviction_ms`` (Kafka's ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``, 120000;
   KIP-227 named it ``min.incremental.fetch.session.eviction.ms``, Kafka never made it a setting);
2. otherwise the least valuable evictable session goes if it is worth no more than the new one;
   value orders ``(privileged, size, id)``, and the new session counts with id 0, so it must be
   strictly larger (more partitions) or privileged against an unprivileged one. Sessions of
   followers are privileged, sessions of consumers are not. Evictable: for a privileged new
   session, every unprivileged session and every privileged one created more than ``eviction_ms``
   before its last use; for an unprivileged new session, only sessions (of either kind) created
   more than ``eviction_ms`` before their last use. Evictability and size are recorded when a
   session is created or used (Kafka's ``touch``), not re-evaluated at eviction time.
3. otherwise no session is created: the full fetch is still answered, with session id 0, and the
   client goes on with full fetches.

Kafka (3.8+) splits the cache into 8 shards of ``slots / 8`` and evicts within a shard; here there
is one shard (one lock; the GIL leaves nothing to gain from more), i.e. Kafka's behaviour with one
shard, which is what Kafka's own ``FetchSessionTest`` exercises. Finding an eviction candidate scans
the sessions: O(``max_entries``), only when the cache is full and a full fetch asks for a session.

Limits: ``max_entries`` sessions (at most :data:`MAX_CACHE_SLOTS`), and two of this project's
own (Kafka has neither): at most ``max_partitions_per_session`` partitions in one session
(default 10,000) and ``max_cached_partitions`` in all sessions together (default 1,000,000). A
full fetch that would break the first, or the second even after evicting every stale session, is
answered without creating a session (session id 0); an incremental fetch that would grow its
session beyond either closes the session and gets FETCH_SESSION_ID_NOT_FOUND; either way the
client falls back to full fetches. A cached partition costs about 350 bytes (measured, with the
request values it keeps), so the cache holds at most about 350 MB with the defaults. Session ids
are drawn at random from ``[1, 2**31 - 2]`` and drawn again while taken (at most
:data:`MAX_ID_ATTEMPTS` draws, which a cache of at most a million sessions never exhausts).

Invariants: the cache holds at most ``max_entries`` sessions, with distinct non-zero ids; a
session's epoch is >= 1; a session in the cache holds at least one and at most
``max_partitions_per_session`` partitions (an incremental fetch that empties it removes it);
``total_partitions``, the sum of the sizes recorded at the sessions' last use, is at most
``max_cached_partitions``.

Thread safety: the cache is shared by the request handler threads and guarded by one re-entrant
lock (:attr:`FetchSessionCache.lock`). It covers every read or change of the cache's maps and of
any session's state (partitions, epoch, last use): :meth:`FetchManager.new_context` holds it while
it looks up and updates the session, and ``update_and_generate_response`` of a full or incremental
context holds it while it creates a session or compares and updates the cached partitions. It is
never held while a partition is read from the log or a response is sent: a context hands out an
immutable snapshot of the partitions to read (:attr:`FetchContext.partitions`). Values (requests,
responses, partitions) are immutable and thread-safe; record data in a response is opaque (``R``:
bytes, or a file region for ``sendfile``) and only its ``len()`` is used.

The Fetch API handler's seam: ``context = manager.new_context(request, topic_names)``; read
``context.partitions``; ``response = context.update_and_generate_response(results)``; encode
``response.error_code``, ``response.session_id`` and ``response.partitions``.
"""

from __future__ import annotations

import enum
import random
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import Generic, TypeVar

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    FetchSessionIdNotFoundError,
    FetchSessionTopicIdError,
    InvalidFetchSessionEpochError,
    KafkaApiError,
    KafkaLogError,
)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = (1 << 31) - 1
TOPIC_ID_MIN_VERSION = 13
NO_ERROR = ErrorCode.none
NO_EPOCH = -1
NO_PREFERRED_READ_REPLICA = -1
ZERO_UUID = uuid.UUID(int=0)

DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
DEFAULT_MAX_PARTITIONS_PER_SESSION = 10_000
DEFAULT_MAX_CACHED_PARTITIONS = 1_000_000
MAX_CACHE_SLOTS = 1 << 20
MAX_ID_ATTEMPTS = 64
_SESSION_ID_BOUND = MAX_EPOCH  # ids in [1, 2**31 - 2], as Kafka's nextInt(1, Int.MaxValue)

R = TypeVar("R", bound=Sized)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: FINAL_EPOCH stays final, ``2**31 - 1`` wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


class FetchSessionMisuseError(KafkaLogError):
    """A caller broke the context's contract (a response for a partition that was not asked
    for, or an id space exhausted): a bug in the server, never a client's mistake."""


class RequestKind(enum.Enum):
    """What a request's ``(session_id, epoch)`` asks for; see the module docstring."""

    SESSIONLESS = "sessionless"
    NEW_SESSION = "new_session"
    CLOSE_AND_NEW_SESSION = "close_and_new_session"
    CLOSE_SESSION = "close_session"
    INCREMENTAL = "incremental"


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """A fetch request's session id and epoch (Kafka's ``FetchMetadata``)."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full fetch (epoch 0 or -1): the request lists every partition it wants."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def kind(self) -> RequestKind:
        if not self.is_full:
            return RequestKind.INCREMENTAL
        new = self.epoch == INITIAL_EPOCH
        if self.session_id == INVALID_SESSION_ID:
            return RequestKind.NEW_SESSION if new else RequestKind.SESSIONLESS
        return RequestKind.CLOSE_AND_NEW_SESSION if new else RequestKind.CLOSE_SESSION

    def next_incremental(self) -> FetchMetadata:
        """The metadata of the client's next incremental fetch in this session."""
        return FetchMetadata(self.session_id, next_epoch(self.epoch))


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition as a fetch names it: by topic id (v13+; ``topic`` is ``None`` when the broker
    does not know the id) or by topic name (< v13; ``topic_id`` is :data:`ZERO_UUID`).

    Values as the client sent them: the server judges them (unknown topic, bad partition)."""

    topic_id: uuid.UUID
    topic: str | None
    partition: int

    @classmethod
    def by_name(cls, topic: str, partition: int) -> TopicIdPartition:
        return cls(ZERO_UUID, topic, partition)

    @property
    def session_key(self) -> tuple[uuid.UUID | str | None, int]:
        """The identity inside a session: topic id and partition when the id is set (a partition
        with an unknown name is the same as one with its name), else topic name and partition."""
        if self.topic_id != ZERO_UUID:
            return (self.topic_id, self.partition)
        return (self.topic, self.partition)

    def __str__(self) -> str:
        name = self.topic if self.topic is not None else f"<unknown {self.topic_id}>"
        return f"{name}-{self.partition}"


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    """One partition's fetch parameters (Kafka's ``FetchRequest.PartitionData``); epochs are -1
    when absent, as on the wire; ``log_start_offset`` is the fetcher's (followers), -1 for
    consumers."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """A diverging epoch in a response (v12+): the follower must truncate to ``end_offset``."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """One aborted transaction of a read_committed response (v4+)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponsePartition(Generic[R]):
    """One partition of a fetch response (Kafka's ``FetchResponseData.PartitionData``).

    ``records`` is whatever the server sends (bytes, or a file region for ``sendfile``); the
    session only asks for its ``len()``, the number of record bytes."""

    error_code: int = NO_ERROR
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    preferred_read_replica: int = NO_PREFERRED_READ_REPLICA
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    records: R | None = None

    @property
    def records_size(self) -> int:
        return 0 if self.records is None else len(self.records)


@dataclass(frozen=True, slots=True)
class FetchSessionRequest:
    """What the session layer needs of a parsed Fetch request.

    ``metadata`` is :data:`LEGACY` for Fetch < v7 (no session fields); ``partitions`` in request
    order (a partition listed twice: the last parameters win, at the first position, as in
    Kafka's map); ``forgotten``: the partitions of the request's forgotten topics (v7+);
    ``is_follower``: the replica id is a broker's (>= 0)."""

    version: int
    metadata: FetchMetadata
    partitions: tuple[tuple[TopicIdPartition, FetchRequestPartition], ...] = ()
    forgotten: tuple[TopicIdPartition, ...] = ()
    is_follower: bool = False


@dataclass(frozen=True, slots=True)
class FetchContextResponse(Generic[R]):
    """The session layer's answer: the top-level error code and session id of the Fetch
    response and the partitions it carries, in order."""

    error_code: int
    session_id: int
    partitions: tuple[tuple[TopicIdPartition, FetchResponsePartition[R]], ...]
    throttle_time_ms: int = 0


PartitionResults = Mapping[TopicIdPartition, FetchResponsePartition[R]]
PartitionsToRead = tuple[tuple[TopicIdPartition, FetchRequestPartition], ...]


class CachedPartition:
    """A partition in a session: its last request parameters, and the high watermark and log
    start offset last sent to the fetcher. Mutable; only touched under the cache lock."""

    __slots__ = ("tip", "request", "high_watermark", "log_start_offset")

    def __init__(
        self,
        tip: TopicIdPartition,
        request: FetchRequestPartition,
        high_watermark: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        self.tip = tip
        self.request = request
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset

    def maybe_resolve_name(self, topic_names: Mapping[uuid.UUID, str]) -> None:
        if self.tip.topic is None:
            name = topic_names.get(self.tip.topic_id)
            if name is not None:
                self.tip = TopicIdPartition(self.tip.topic_id, name, self.tip.partition)

    def must_respond(self, result: FetchResponsePartition[Sized], update: bool) -> bool:
        """Whether an incremental response must carry this partition; with ``update``, remember
        the high watermark and log start offset sent (Kafka's ``maybeUpdateResponseData``)."""
        respond = result.records_size > 0
        if self.high_watermark != result.high_watermark:
            respond = True
            if update:
                self.high_watermark = result.high_watermark
        if self.log_start_offset != result.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = result.log_start_offset
        if result.preferred_read_replica != NO_PREFERRED_READ_REPLICA:
            respond = True
        if result.error_code != NO_ERROR:
            respond = True
            if update:
                self.high_watermark = -1
        if result.diverging_epoch is not None and result.diverging_epoch.epoch >= 0:
            respond = True
        return respond


@dataclass(frozen=True, slots=True, order=True)
class EvictableKey:
    """How valuable a session is: unprivileged before privileged, then by size, then id."""

    privileged: bool
    size: int
    session_id: int


class FetchSession:
    """One session; mutable, only touched under the cache lock. ``cached_size``,
    ``evictable_by_all`` and ``evictable_by_privileged`` are what the cache recorded at the
    session's last use (-1 / False: not in a cache)."""

    __slots__ = (
        "id",
        "privileged",
        "uses_topic_ids",
        "creation_ms",
        "last_used_ms",
        "epoch",
        "partitions",
        "cached_size",
        "evictable_by_all",
        "evictable_by_privileged",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        uses_topic_ids: bool,
        now: int,
        partitions: dict[tuple[uuid.UUID | str | None, int], CachedPartition],
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions = partitions
        self.cached_size = -1
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    @property
    def size(self) -> int:
        return len(self.partitions)

    @property
    def evictable_key(self) -> EvictableKey:
        return EvictableKey(self.privileged, self.cached_size, self.id)

    def update(
        self,
        fetch_data: Mapping[TopicIdPartition, FetchRequestPartition],
        forgotten: Iterable[TopicIdPartition],
    ) -> None:
        """Add the request's partitions (or update their parameters) and drop the forgotten."""
        for tip, request in fetch_data.items():
            key = tip.session_key
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(tip, request)
            else:
                cached.request = request
        for tip in forgotten:
            self.partitions.pop(tip.session_key, None)

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged}, size={self.size}, "
            f"uses_topic_ids={self.uses_topic_ids}, creation_ms={self.creation_ms}, "
            f"last_used_ms={self.last_used_ms}, epoch={self.epoch})"
        )


class FetchSessionCache:
    """The bounded session cache; see the module docstring for its limits, eviction rules and
    lock. Methods that take ``now`` (milliseconds) are Kafka's; :class:`FetchManager` passes
    its clock's time."""

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        max_partitions_per_session: int = DEFAULT_MAX_PARTITIONS_PER_SESSION,
        max_cached_partitions: int = DEFAULT_MAX_CACHED_PARTITIONS,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 <= max_entries <= MAX_CACHE_SLOTS:
            raise ValueError(
                f"max.incremental.fetch.session.cache.slots={max_entries} is not in "
                f"[0, {MAX_CACHE_SLOTS}]"
            )
        if eviction_ms < 0:
            raise ValueError(f"fetch session eviction ms {eviction_ms} is negative")
        if max_partitions_per_session < 1:
            raise ValueError(f"max partitions per fetch session {max_partitions_per_session} < 1")
        if max_cached_partitions < 1:
            raise ValueError(f"max cached fetch session partitions {max_cached_partitions} < 1")
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.max_partitions_per_session = max_partitions_per_session
        self.max_cached_partitions = max_cached_partitions
        self.lock = threading.RLock()
        self.evictions = 0
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._total_partitions = 0

    def get(self, session_id: int) -> FetchSession | None:
        with self.lock:
            return self._sessions.get(session_id)

    @property
    def size(self) -> int:
        with self.lock:
            return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        """Partitions cached over all sessions (as recorded at each session's last use)."""
        with self.lock:
            return self._total_partitions

    def session_ids(self) -> frozenset[int]:
        with self.lock:
            return frozenset(self._sessions)

    def new_session_id(self) -> int:
        """A random id in ``[1, 2**31 - 2]`` that no session in the cache holds."""
        with self.lock:
            for _ in range(MAX_ID_ATTEMPTS):
                session_id = self._rng.randrange(1, _SESSION_ID_BOUND)
                if session_id not in self._sessions:
                    return session_id
        raise FetchSessionMisuseError(
            f"no free fetch session id after {MAX_ID_ATTEMPTS} draws with "
            f"{len(self._sessions)} sessions cached"
        )

    def maybe_create_session(
        self,
        now: int,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        create_partitions: Callable[[], dict[tuple[uuid.UUID | str | None, int], CachedPartition]],
    ) -> int:
        """Create a session of ``size`` partitions if there is room or a session may be evicted
        for it; its id, or :data:`INVALID_SESSION_ID` when there is none."""
        with self.lock:
            if size > self.max_partitions_per_session:
                return INVALID_SESSION_ID
            while not self.fits(size, 0) and self._evict_stale(now):
                pass  # each turn removes a session: at most len(sessions) turns
            if not self.fits(size, 0):
                return INVALID_SESSION_ID
            if len(self._sessions) >= self.max_entries and not self._try_evict(
                privileged, EvictableKey(privileged, size, 0), now
            ):
                return INVALID_SESSION_ID
            session = FetchSession(
                self.new_session_id(), privileged, uses_topic_ids, now, create_partitions()
            )
            self._sessions[session.id] = session
            self.touch(session, now)
            return session.id

    def fits(self, size: int, cached_size: int) -> bool:
        """Whether a session may hold ``size`` partitions, ``cached_size`` of which the cache
        counts already: both partition limits."""
        with self.lock:
            total = self._total_partitions - cached_size + size
            return size <= self.max_partitions_per_session and total <= self.max_cached_partitions

    def _try_evict(self, privileged: bool, key: EvictableKey, now: int) -> bool:
        """Evict the stale least recently used session, or else the least valuable evictable
        one if ``key`` is worth at least as much (Kafka's ``tryEvict``)."""
        if not self._sessions:
            return False
        if self._evict_stale(now):
            return True
        if privileged:
            candidates = [s for s in self._sessions.values() if s.evictable_by_privileged]
        else:
            candidates = [s for s in self._sessions.values() if s.evictable_by_all]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: s.evictable_key)
        if key < victim.evictable_key:
            return False
        self._evict(victim)
        return True

    def _evict_stale(self, now: int) -> bool:
        """Evict the least recently used session if it is stale; whether one was."""
        if not self._sessions:
            return False
        lru = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - lru.last_used_ms <= self.eviction_ms:
            return False
        self._evict(lru)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        """Remove a session from the cache; the removed session, or ``None`` when absent."""
        with self.lock:
            session = self._sessions.pop(session_id, None)
            if session is not None:
                self._total_partitions -= session.cached_size
                session.cached_size = -1
                session.evictable_by_all = session.evictable_by_privileged = False
            return session

    def touch(self, session: FetchSession, now: int) -> None:
        """Record a use of ``session`` at ``now``: its last use, size and evictability."""
        with self.lock:
            if self._sessions.get(session.id) is not session:
                return
            session.last_used_ms = now
            if session.cached_size != -1:
                self._total_partitions -= session.cached_size
            session.cached_size = session.size
            self._total_partitions += session.cached_size
            old = now - session.creation_ms > self.eviction_ms
            session.evictable_by_privileged = old or not session.privileged
            session.evictable_by_all = old


class FetchContext(ABC, Generic[R]):
    """What one fetch request reads and how its response is built.

    ``partitions``: the partitions to read, with their fetch parameters, in order (an immutable
    snapshot; read them without any lock)."""

    partitions: PartitionsToRead

    @abstractmethod
    def update_and_generate_response(
        self, partition_results: PartitionResults[R]
    ) -> FetchContextResponse[R]:
        """The response for the partitions read (keys from :attr:`partitions`, in the order to
        send); updates the session. Call it at most once per context."""

    def throttled_response(self, throttle_time_ms: int) -> FetchContextResponse[R]:
        """The empty response of a request throttled by a quota; the session is not updated."""
        return FetchContextResponse(NO_ERROR, INVALID_SESSION_ID, (), throttle_time_ms)


class SessionErrorContext(FetchContext[R]):
    """A request with a session error: nothing is read, the response carries the error only."""

    def __init__(self, error: type[KafkaApiError], metadata: FetchMetadata) -> None:
        self.error = error
        self.metadata = metadata
        self.partitions = ()

    def update_and_generate_response(
        self, partition_results: PartitionResults[R]
    ) -> FetchContextResponse[R]:
        return FetchContextResponse(self.error.code, INVALID_SESSION_ID, ())


class SessionlessFetchContext(FetchContext[R]):
    """A full fetch without a session: every partition read is sent, session id 0."""

    def __init__(self, fetch_data: dict[TopicIdPartition, FetchRequestPartition]) -> None:
        self.partitions = tuple(fetch_data.items())

    def update_and_generate_response(
        self, partition_results: PartitionResults[R]
    ) -> FetchContextResponse[R]:
        return FetchContextResponse(NO_ERROR, INVALID_SESSION_ID, tuple(partition_results.items()))


class FullFetchContext(FetchContext[R]):
    """A full fetch that asks for a session: every partition read is sent, and a session holding
    them is created if the cache has (or can make) room."""

    def __init__(
        self,
        cache: FetchSessionCache,
        clock: Callable[[], int],
        fetch_data: dict[TopicIdPartition, FetchRequestPartition],
        uses_topic_ids: bool,
        is_follower: bool,
    ) -> None:
        self._cache = cache
        self._clock = clock
        self._fetch_data = fetch_data
        self._uses_topic_ids = uses_topic_ids
        self._is_follower = is_follower
        self.partitions = tuple(fetch_data.items())

    def _cached_partitions(
        self, partition_results: PartitionResults[R]
    ) -> dict[tuple[uuid.UUID | str | None, int], CachedPartition]:
        cached: dict[tuple[uuid.UUID | str | None, int], CachedPartition] = {}
        for tip, result in partition_results.items():
            request = self._fetch_data.get(tip)
            if request is None:
                raise FetchSessionMisuseError(
                    f"fetch response for partition {tip}, which the full fetch did not ask for"
                )
            cached[tip.session_key] = CachedPartition(
                tip, request, result.high_watermark, result.log_start_offset
            )
        return cached

    def update_and_generate_response(
        self, partition_results: PartitionResults[R]
    ) -> FetchContextResponse[R]:
        session_id = self._cache.maybe_create_session(
            self._clock(),
            self._is_follower,
            len(partition_results),
            self._uses_topic_ids,
            lambda: self._cached_partitions(partition_results),
        )
        return FetchContextResponse(NO_ERROR, session_id, tuple(partition_results.items()))


class IncrementalFetchContext(FetchContext[R]):
    """An incremental fetch in a session: the session's partitions are read, and only those that
    changed are sent (see the module docstring)."""

    def __init__(
        self, cache: FetchSessionCache, metadata: FetchMetadata, session: FetchSession
    ) -> None:
        self._cache = cache
        self._metadata = metadata
        self._session = session
        self.partitions = tuple((c.tip, c.request) for c in session.partitions.values())

    @property
    def session_id(self) -> int:
        return self._session.id

    def _epoch_is_current(self) -> bool:
        """False when another request of this session came in between (a duplicate request)."""
        return self._session.epoch == next_epoch(self._metadata.epoch)

    def update_and_generate_response(
        self, partition_results: PartitionResults[R]
    ) -> FetchContextResponse[R]:
        session = self._session
        with self._cache.lock:
            if not self._epoch_is_current():
                return FetchContextResponse(InvalidFetchSessionEpochError.code, session.id, ())
            for tip in partition_results:  # checked first: a refused response changes nothing
                if tip.session_key not in session.partitions:
                    raise FetchSessionMisuseError(
                        f"fetch response for partition {tip}, which is not in fetch session "
                        f"{session.id}"
                    )
            selected = []
            for tip, result in partition_results.items():
                key = tip.session_key
                cached = session.partitions[key]
                if cached.must_respond(result, update=True):
                    selected.append((tip, result))
                    if result.records_size > 0:
                        # Partitions that returned records go last in the next read.
                        session.partitions[key] = session.partitions.pop(key)
        return FetchContextResponse(NO_ERROR, session.id, tuple(selected))

    def throttled_response(self, throttle_time_ms: int) -> FetchContextResponse[R]:
        with self._cache.lock:
            error = NO_ERROR if self._epoch_is_current() else InvalidFetchSessionEpochError.code
        return FetchContextResponse(error, self._session.id, (), throttle_time_ms)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FetchManager:
    """The entry point: :meth:`new_context` turns a Fetch request into its context."""

    def __init__(self, cache: FetchSessionCache, clock: Callable[[], int] = _monotonic_ms) -> None:
        self.cache = cache
        self._clock = clock

    def new_context(
        self,
        request: FetchSessionRequest,
        topic_names: Mapping[uuid.UUID, str] | None = None,
    ) -> FetchContext[R]:
        """The context of ``request``. ``topic_names``: the topic ids the broker knows, to name
        cached partitions whose id was unknown when they entered the session (v13+)."""
        fetch_data = dict(request.partitions)
        metadata = request.metadata
        if metadata.is_full:
            if metadata.session_id != INVALID_SESSION_ID:
                self.cache.remove(metadata.session_id)
            if metadata.epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(
                self.cache,
                self._clock,
                fetch_data,
                request.version >= TOPIC_ID_MIN_VERSION,
                request.is_follower,
            )
        with self.cache.lock:
            return self._incremental_context(request, fetch_data, topic_names or {})

    def _incremental_context(
        self,
        request: FetchSessionRequest,
        fetch_data: dict[TopicIdPartition, FetchRequestPartition],
        topic_names: Mapping[uuid.UUID, str],
    ) -> FetchContext[R]:
        metadata = request.metadata
        session = self.cache.get(metadata.session_id)
        if session is None:
            return SessionErrorContext(FetchSessionIdNotFoundError, metadata)
        if session.epoch != metadata.epoch:
            return SessionErrorContext(InvalidFetchSessionEpochError, metadata)
        if session.uses_topic_ids != (request.version >= TOPIC_ID_MIN_VERSION):
            return SessionErrorContext(FetchSessionTopicIdError, metadata)
        session.update(fetch_data, request.forgotten)
        if not session.partitions:
            self.cache.remove(session.id)
            return SessionlessFetchContext(fetch_data)
        if not self.cache.fits(session.size, session.cached_size):
            self.cache.remove(session.id)
            return SessionErrorContext(FetchSessionIdNotFoundError, metadata)
        if session.uses_topic_ids:
            for cached in session.partitions.values():
                cached.maybe_resolve_name(topic_names)
        self.cache.touch(session, self._clock())
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(self.cache, metadata, session)
