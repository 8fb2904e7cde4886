"""Creating topics and partitions in the controller (Kafka's CreateTopics and CreatePartitions):
:class:`TopicCreation`, a base class of
:class:`~broker_embedded.replication.controller.Controller` holding its creation methods.

Creating partitions (CreateTopics, CreatePartitions), Kafka's way: the topic is checked and
*registered* under the lock (its entry written durably in the log dirs of its brokers, one
write and one sync each, and in the state file), and from then on it exists: Metadata lists
it, a second creation is TOPIC_ALREADY_EXISTS, DeleteTopics deletes it. Its partitions wait
(:meth:`Controller.pending_partitions`) until their logs are made on their brokers
:data:`CREATE_STEP` at a time (each step: leader states decided and sent, the brokers
creating the logs with one sync and one checkpoint write for the step), the lock released
between steps. A partition waiting has no leader: Metadata answers it LEADER_NOT_AVAILABLE,
Produce, Fetch and ListOffsets NOT_LEADER_OR_FOLLOWER (a partition the controller knows that
no broker hosts yet, as Kafka's broker answers before it has applied the partition's state).
``background=True`` returns once registered (except for a creation that fits in one step
while nothing waits: made before the answer, a step costing about what a registration
does, so that a client producing right after the answer finds the leaders); whoever owns
the controller then calls :meth:`create_step` until it answers None (the server's admin
thread); otherwise the
creation makes the steps itself and, when one fails or ``stop`` is set, removes the topic (or
the new partitions) again. At most :data:`MAX_PENDING_PARTITIONS` partitions wait: a
background creation beyond is refused THROTTLING_QUOTA_EXCEEDED, creating nothing. A step
that fails (a full disk) leaves its partitions waiting, retried after
:data:`STEP_RETRY_S` (one log line per episode), the topic moved behind the others. A
process stopped or killed meanwhile leaves the topic registered with some partitions: the
next opening of a standalone broker adopts it whole and creates the missing ones (a reopened
controller with a state file creates those without a stored state likewise), before the
opening returns, or, with :attr:`Controller.complete_in_background` (``kafkalog serve``),
as waiting partitions made by :meth:`create_step` once the server runs, so that it listens
at once (not Kafka's internal topics, ``__``: their coordinators load them at the opening).

Thread safety: under the controller's lock, released between steps; these methods work on
the controller's state (controller.py), so this class is never used alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from broker_embedded.errors import (
    BrokerClosedError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaLogError,
    ThrottlingQuotaExceededError,
    TopicAlreadyExistsError,
)
from broker_embedded.replication.replica_assignment import (
    assign_replicas_to_brokers,
    assign_replicas_to_new_partitions,
)
from broker_embedded.replication.topic_metadata import TopicMetadata
from broker_embedded.storage.log_config import validate_topic_config
from broker_embedded.storage.partition_metadata import new_topic_id
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import (
    TopicPartition,
    check_no_collision,
    validate_topic,
)

log = logging.getLogger(__name__)
CREATE_STEP = 100  # partitions made under one hold of the lock (module docstring)
MAX_PENDING_PARTITIONS = 20_000  # registered partitions whose logs are not made yet
STEP_RETRY_S = 1.0  # after a step that failed (a full disk), before the next
STEP_YIELD_S = 0.001  # between two steps, outside the lock


class TopicCreation:
    """The topic and partition creation of a controller (module docstring)."""

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, object] | None = None,
        *,
        rng: object = None,
        validate_only: bool = False,
        assignment: Sequence[Sequence[int]] | None = None,
        stop: threading.Event | None = None,
        background: bool = False,
    ) -> TopicMetadata | None:
        """Create a topic; with ``validate_only`` only check that it could be (Kafka's
        CreateTopics ``validate_only``: the same errors, nothing created, ``None``).
        ``assignment``: the replicas of each partition in order (the first is the preferred
        leader), instead of ``partitions`` and ``replication_factor`` (see
        :meth:`_manual_assignment`). The topic is registered, then its partitions are made in
        steps (module docstring, "Creating partitions"): by this call, ``stop`` set stopping
        and undoing it (``BrokerClosedError``), or with ``background`` by :meth:`create_step`
        (the answer: the registered topic, its partitions without a leader yet)."""
        with self._lock:
            self._check_active()
            validate_topic(name)
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            check_no_collision(name, list(self._topics))
            overrides = {k: str(v) for k, v in (config or {}).items()}
            remote = self._remote_storage_enabled()
            validate_topic_config(
                self._defaults(), overrides, name, remote_storage_system_enable=remote
            )
            if assignment is not None:
                placed = self._manual_assignment(name, assignment)
            else:
                placed = self._placement(name, partitions, replication_factor, rng)
            if validate_only:
                return None
            background = background and self._in_background(name, len(placed))
            entry = TopicEntry(
                new_topic_id(), len(placed), len(placed[0]), MappingProxyType(overrides)
            )
            self._register(name, entry, placed, None)
        if not background:
            self._make_now(name, None, stop)
        return self.describe(name)

    def _placement(
        self, name: str, partitions: int, replication_factor: int, rng: object
    ) -> dict[int, tuple[int, ...]]:
        if partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r}: partitions must be >= 1")
        brokers = [self._brokers[b].broker_metadata for b in sorted(self._alive)]
        if replication_factor < 1 or replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"topic {name!r}: replication factor {replication_factor} must be in "
                f"[1, {len(brokers)}] (the live brokers)"
            )
        placed = assign_replicas_to_brokers(
            brokers,
            partitions,
            replication_factor,
            topic=name,
            rng=rng,  # type: ignore[arg-type]
        )
        return {p: tuple(r) for p, r in placed.items()}

    def _manual_assignment(
        self, name: str, assignment: Sequence[Sequence[int]]
    ) -> dict[int, tuple[int, ...]]:
        """Kafka's checks of a manual assignment (``ReplicationControlManager``), each an
        INVALID_REPLICA_ASSIGNMENT: at least one partition, every replica list non-empty,
        naming registered brokers once each, all of one length, and at least one replica of
        each partition alive."""
        where = f"topic {name!r}: the manual partition assignment"
        if not assignment:
            raise InvalidReplicaAssignmentError(f"{where} holds no partition")
        placed: dict[int, tuple[int, ...]] = {}
        for partition, replicas in enumerate(assignment):
            if not replicas:
                raise InvalidReplicaAssignmentError(f"{where} includes an empty replica list")
            for broker_id in sorted(replicas):
                if broker_id not in self._brokers:
                    raise InvalidReplicaAssignmentError(
                        f"{where} includes broker {broker_id}, but no such broker is registered"
                    )
            if len(set(replicas)) != len(replicas):
                twice = next(b for b in replicas if list(replicas).count(b) > 1)
                raise InvalidReplicaAssignmentError(
                    f"{where} includes the broker {twice} more than once"
                )
            if placed and len(replicas) != len(placed[0]):
                raise InvalidReplicaAssignmentError(
                    f"{where} includes a partition with {len(replicas)} replica(s), but this is "
                    f"not consistent with previous partitions, which have {len(placed[0])} "
                    "replica(s)"
                )
            if not any(b in self._alive for b in replicas):
                raise InvalidReplicaAssignmentError(
                    f"{where}: all brokers of partition {partition} are stopped"
                )
            placed[partition] = tuple(replicas)
        return placed

    def _in_background(self, name: str, partitions: int) -> bool:
        """Whether a background creation of ``partitions`` is made in the background: not when
        they fit in one step and nothing waits (made before the answer: one step costs about
        what registering does, and a client producing right after its answer finds the
        leaders); THROTTLING_QUOTA_EXCEEDED when they would put the partitions waiting above
        :attr:`max_pending_partitions` (module docstring)."""
        waiting = self.pending_partitions()
        if not waiting and partitions <= CREATE_STEP:
            return False
        if waiting and waiting + partitions > self.max_pending_partitions:
            raise ThrottlingQuotaExceededError(
                f"topic {name!r}: {partitions} partitions refused for now: {waiting} partitions "
                f"of earlier creations still wait for their logs (at most "
                f"{self.max_pending_partitions}); retry",
                throttle_time_ms=int(STEP_RETRY_S * 1000),
            )
        return True

    def pending_partitions(self, name: str | None = None) -> int:
        """How many registered partitions (of ``name``, or of every topic) wait for their logs."""
        with self._lock:
            if name is not None:
                return len(self._pending.get(name, ()))
            return sum(len(p) for p in self._pending.values())

    def _register(
        self,
        name: str,
        entry: TopicEntry,
        placed: dict[int, tuple[int, ...]],
        previous: TopicEntry | None,
    ) -> None:
        """Register ``entry`` with the new partitions ``placed`` (waiting for their logs):
        durably in the log dir of each broker hosting one, then here and in the state file.
        A write that fails (a full disk) is undone and raised: nothing registered."""
        hosts = sorted(b for b in self._alive if any(b in r for r in placed.values()))
        written: list[int] = []
        try:
            for b in hosts:
                self._brokers[b].log_manager.put_topic(name, entry)
                written.append(b)
            self._topics[name] = entry
            self._names_by_id[entry.topic_id] = name
            self._assignment.setdefault(name, {}).update(placed)
            self._pending.setdefault(name, {}).update(placed)
            self._save()
        except BaseException:
            self._forget_partitions(name, previous, written)
            raise

    def _forget_partitions(self, name: str, previous: TopicEntry | None, hosts: list[int]) -> None:
        """Remove the topic (``previous`` None) or its partitions beyond ``previous``: on the
        live ``hosts`` (replicas stopped, directories and log dir entry removed), here, and in
        the state file. A broker that fails to is logged (its next opening finds the topic
        registered and completes it)."""
        first = 0 if previous is None else previous.partitions
        tps = [TopicPartition(name, p) for p in self._assignment.get(name, {}) if p >= first]
        for b in hosts:
            broker = self._brokers.get(b)
            if broker is None or b not in self._alive:
                continue
            try:
                broker.replica_manager.stop_replicas(self.epoch, tps)
                if previous is None:
                    broker.log_manager.delete_topic(name)
                else:
                    broker.log_manager.remove_partitions(name, previous)
            except Exception as e:  # the broker stopped meanwhile, or its disk is full
                log.warning("removing the new partitions of %r on broker %d: %s", name, b, e)
        for tp in tps:
            self._states.pop(tp, None)
        waiting = self._pending.get(name, {})
        for tp in tps:
            waiting.pop(tp.partition, None)
        if not waiting:
            self._pending.pop(name, None)
        current = self._topics.get(name)
        if previous is None:
            if current is not None:
                self._names_by_id.pop(current.topic_id, None)
            self._topics.pop(name, None)
            self._assignment.pop(name, None)
        else:
            self._topics[name] = previous
            for tp in tps:
                self._assignment[name].pop(tp.partition, None)
        self._save_or_defer()

    def _make_now(
        self, name: str, previous: TopicEntry | None, stop: threading.Event | None
    ) -> None:
        """Make the waiting partitions of ``name`` by steps on this thread; a step that fails,
        or ``stop`` set, removes what was registered (module docstring)."""
        try:
            while True:
                if stop is not None and stop.is_set():
                    raise BrokerClosedError(
                        f"creating partitions of topic {name!r} stopped (the server stops) "
                        f"with {self.pending_partitions(name)} not made; undone"
                    )
                with self._lock:
                    self._check_active()
                    if name not in self._pending:
                        return
                    self._make_step(name)
                time.sleep(STEP_YIELD_S)  # the lock is not fair: let its waiters take it now
        except BaseException:
            with self._lock:
                if name in self._topics:
                    placed = self._assignment[name].values()
                    hosts = sorted(b for b in self._alive if any(b in r for r in placed))
                    self._forget_partitions(name, previous, hosts)
            raise

    def _make_step(self, name: str) -> None:
        """Make the next :data:`CREATE_STEP` waiting partitions of ``name`` (under the lock):
        leader states decided and sent, the brokers creating the logs (one sync). Raises what
        the brokers raise, the partitions still waiting."""
        waiting = self._pending[name]
        chunk = sorted(waiting.items())[:CREATE_STEP]
        step = {
            TopicPartition(name, p): self._initial_state(TopicPartition(name, p), r)
            for p, r in chunk
        }
        self._send(step)
        self._states.update(step)
        for p, _ in chunk:
            del waiting[p]
        if not waiting:
            del self._pending[name]
            self._save_or_defer()  # the partition states (missing ones start as new anyway)

    @property
    def creation_failing(self) -> bool:
        """Whether the last background step failed (a full disk): its partitions still wait."""
        with self._lock:
            return self._step_failing

    def create_step(self) -> float | None:
        """One step of the background creations (module docstring): None when nothing waits,
        else the seconds after which the next call is due (0: at once; :data:`STEP_RETRY_S`
        after a step that failed, its topic moved behind the others, one log line an episode).
        """
        with self._lock:
            if self._resigned or not self._pending:
                return None
            name = next(iter(self._pending))
            try:
                self._make_step(name)
            except BrokerClosedError:  # the broker closes: its next opening completes them
                return None
            except (KafkaLogError, OSError) as e:
                self._pending[name] = self._pending.pop(name)  # behind the others
                if not self._step_failing:
                    log.error(
                        "creating the logs of topic %r failed (retried every %.0f s, "
                        "the partitions LEADER_NOT_AVAILABLE until then): %s",
                        name,
                        STEP_RETRY_S,
                        e,
                    )
                self._step_failing = True
                return STEP_RETRY_S
            if self._step_failing:
                log.warning("creating the logs of topic %r works again", name)
                self._step_failing = False
            return 0.0 if self._pending else None

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        stop: threading.Event | None = None,
        background: bool = False,
    ) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions): registered, then
        made in steps as :meth:`create_topic` (``stop`` and ``background`` likewise)."""
        with self._lock:
            self._check_active()
            entry = self._topic(name)
            brokers = [self._brokers[b].broker_metadata for b in sorted(self._alive)]
            new = assign_replicas_to_new_partitions(
                brokers, {p: list(r) for p, r in self._assignment[name].items()}, total, topic=name
            )
            background = background and self._in_background(name, len(new))
            grown = replace(entry, partitions=total)
            self._register(name, grown, {p: tuple(r) for p, r in new.items()}, entry)
        if not background:
            self._make_now(name, entry, stop)
        return self.describe(name)
