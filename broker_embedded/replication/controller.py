"""The controller of an embedded cluster: topics, replica placement, leaders and ISRs, with a
controller epoch (Kafka's controller, reduced to one process).

- Brokers register (:meth:`Controller.register_broker`); a stopped broker is reported with
  :meth:`broker_stopped`, a restarted one with :meth:`register_broker` again.
- Topics: replicas are placed by replica_assignment.py over the live brokers (rack-aware when
  every broker has a rack); partition ``p``'s leader is its first replica, the ISR all its live
  replicas, leader epoch 0 (or one above the highest epoch any replica's log has seen, when the
  logs already exist).
- Decisions go to the brokers as :class:`LeaderAndIsr` states stamped with the controller epoch;
  a broker refuses states from an older controller epoch (STALE_CONTROLLER_EPOCH). A controller
  replaced by :meth:`successor` (epoch + 1) can no longer change anything: every decision it is
  asked for is STALE_CONTROLLER_EPOCH, the brokers are pointed at the successor, which sends
  them every partition's state with its epoch at once (so they refuse the old epoch from then
  on); :attr:`Controller.current` follows the chain of successors.
- Leader election when a broker stops: the first live replica (assignment order) that is in the
  ISR becomes leader, with the leader epoch and partition epoch bumped; with none left the
  partition goes offline (leader -1) keeping its last ISR, unless
  ``unclean.leader.election.enable`` lets any live replica lead. A stopped follower leaves the
  ISR at once. A restarted broker that was the last ISR member of an offline partition leads it
  again (with unclean election enabled, any restarted replica does). A new leader epoch is
  always above both the previous one and every epoch in the logs of the replicas registered
  with this controller.
- Creating partitions (CreateTopics, CreatePartitions): registered under the lock, then their
  logs made in steps, in the background or before the answer: topic_creation.py.
- Config changes (AlterConfigs, :meth:`alter_topic_config`): a topic's overrides are replaced
  under the lock, validated, written to the log dirs of the live brokers hosting it (whose open
  logs take them at once) and to the state file; a stopped broker gets them when it registers.
- ISR changes proposed by leaders (:meth:`alter_partition`) are checked against the leader epoch
  (FENCED_LEADER_EPOCH), the partition epoch (INVALID_UPDATE_VERSION) and broker liveness
  (INELIGIBLE_REPLICA), then committed with the partition epoch bumped.
- Persistence: with ``store`` the topics, assignments and partition states are kept in a JSON
  file, rewritten atomically at every change::

    {"version": 1, "controller_epoch": E, "next_producer_id": N,
     "topics": {name: {<topic entry>, "assignment": {"0": [ids]},
                       "partition_states": {"0": {"leader": L, "leader_epoch": LE,
                                                  "isr": [ids], "partition_epoch": PE}}}}}

  so that a cluster reopened on the same directories finds its topics. A reopened controller
  takes epoch E + 1 and starts with every partition offline (leader -1) keeping its stored ISR
  and epochs: a partition comes back only when a member of its last ISR registers (as in
  Kafka, where that state outlives the brokers), so a replica that had fallen behind can never
  lead and truncate acknowledged records away. Files without ``partition_states`` (or partitions
  missing from it) start as new partitions. A standalone broker (no store) rebuilds its topics
  from its own log dir instead.

  A full disk (the file cannot be rewritten): an ISR change (:meth:`alter_partition`) or a new
  producer id is refused with KAFKA_STORAGE_ERROR and changes nothing (the leader keeps its
  ISR and proposes again; a change is acted on only once it is on disk, as Kafka commits an
  AlterPartition to its metadata log before answering). A broker that stopped or registered is
  a fact, not a request: its new leaders are elected and sent though the file lags, which is
  rewritten whole at the next change that fits. Either way one log line per episode
  (storage_health.py). A crash while it lags reopens the last state on disk.

Thread safety: one lock guards all state; calls into brokers are made under it (brokers never
call back into the controller while applying a state, and never hold a partition lock while
calling :meth:`alter_partition`, see replica_manager/partition.py).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from broker_embedded.coordinator.coordinator_partition import TRANSACTION_STATE_TOPIC
from broker_embedded.coordinator.internal_topics import ensure_topic, transaction_state_topic
from broker_embedded.coordinator.transaction_coordinator import (
    TransactionCoordinator,
    TransactionMarkerWriter,
    TxnCompletion,
)
from broker_embedded.coordinator.transaction_state_manager import (
    LogTransactionStore,
    load_partition,
    read_log,
)
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    KafkaApiError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    StaleControllerEpochError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.replica_manager.partition import NO_LEADER, LeaderAndIsr
from broker_embedded.replication.topic_creation import MAX_PENDING_PARTITIONS, TopicCreation
from broker_embedded.replication.topic_metadata import PartitionMetadata, TopicMetadata
from broker_embedded.storage.checkpoint_file import write_atomically
from broker_embedded.storage.log_config import LogConfig, validate_topic_config
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.storage_health import StorageHealth
from broker_embedded.storage.topic_config_file import TopicConfigFile, TopicEntry
from broker_embedded.storage.topic_partition import (
    TopicPartition,
)

if TYPE_CHECKING:
    from broker_embedded.replica_manager.replica_manager import ReplicaManager
    from broker_embedded.replication.registered_broker import RegisteredBroker as Broker

log = logging.getLogger(__name__)
CREATE_WAIT_S = 0.5  # a coordinator write waits this long for __transaction_state's creation


class Controller(TopicCreation):
    """See the module docstring."""

    def __init__(self, *, epoch: int = 1, store: str | Path | None = None) -> None:
        self.epoch = epoch
        self._store = Path(store) if store is not None else None
        self._health = StorageHealth(self._store.parent if self._store is not None else ".")
        self._lock = threading.RLock()
        self._brokers: dict[int, Broker] = {}
        self._alive: set[int] = set()
        self._topics: dict[str, TopicEntry] = {}
        self._names_by_id: dict[uuid.UUID, str] = {}  # the inverse of _topics' ids, kept with it
        self._assignment: dict[str, dict[int, tuple[int, ...]]] = {}
        self._states: dict[TopicPartition, LeaderAndIsr] = {}
        self._next_producer_id = 0
        self.transaction_coordinator = TransactionCoordinator(self.new_producer_id)
        self._markers: TransactionMarkerWriter | None = None
        self._txn_topic_creator: threading.Thread | None = None
        self._txn_topic_lock = threading.Lock()  # starts one creator at a time
        self._resigned = False
        self._successor: Controller | None = None
        # registered partitions whose logs are not made yet, by topic, oldest topic first
        self._pending: dict[str, dict[int, tuple[int, ...]]] = {}
        self.max_pending_partitions = MAX_PENDING_PARTITIONS
        # a registering broker's partitions without a log wait for create_step (kafkalog serve)
        self.complete_in_background = False
        self._step_failing = False  # one log line per episode of failing steps
        self._load()

    # -- persistence -------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._store is None or not self._store.exists():
            return
        data = json.loads(self._store.read_text("utf-8"))
        self._next_producer_id = int(data.get("next_producer_id", 0))
        self.epoch = max(self.epoch, int(data.get("controller_epoch", 0)) + 1)
        for name, t in data["topics"].items():
            self._topics[name] = TopicConfigFile._entry(name, t)
            self._names_by_id[self._topics[name].topic_id] = name
            self._assignment[name] = {int(p): tuple(r) for p, r in t["assignment"].items()}
            for p, st in t.get("partition_states", {}).items():
                replicas = self._assignment[name].get(int(p))
                if replicas is None:
                    continue
                # No broker is alive yet: offline, until a member of the last ISR registers.
                self._states[TopicPartition(name, int(p))] = LeaderAndIsr(
                    NO_LEADER,
                    int(st["leader_epoch"]),
                    tuple(int(b) for b in st["isr"]),
                    replicas,
                    int(st["partition_epoch"]),
                )

    def _save(self) -> None:
        if self._store is None:
            return
        topics = {}
        for name, entry in sorted(self._topics.items()):
            t = entry.to_json()
            t["assignment"] = {str(p): list(r) for p, r in sorted(self._assignment[name].items())}
            states = {}
            for p in sorted(self._assignment[name]):
                st = self._states.get(TopicPartition(name, p))
                if st is not None:
                    states[str(p)] = {
                        "leader": st.leader,
                        "leader_epoch": st.leader_epoch,
                        "isr": list(st.isr),
                        "partition_epoch": st.partition_epoch,
                    }
            t["partition_states"] = states
            topics[name] = t
        body = {
            "version": 1,
            "controller_epoch": self.epoch,
            "next_producer_id": self._next_producer_id,
            "topics": topics,
        }
        try:
            write_atomically(self._store, (json.dumps(body, indent=1) + "\n").encode("utf-8"))
        except OSError as e:
            self._health.failed(f"writing the controller's state {self._store.name}", e)
            raise KafkaStorageError(
                f"writing the controller's state {self._store} failed: {e}"
            ) from e
        self._health.succeeded()

    def _save_or_defer(self) -> None:
        """:meth:`_save` for a change that happened whatever the disk says (a broker stopped or
        registered): a failed write is counted (:meth:`_save` logs it) and the file is
        rewritten whole at the next change that fits."""
        try:
            self._save()
        except KafkaStorageError:
            pass

    # -- brokers -----------------------------------------------------------------------------------

    def successor(self) -> Controller:
        """A new controller (epoch + 1) taking over this one's state; this one resigns. The
        brokers are pointed at the successor, which sends them every partition's state with
        its epoch (so that they refuse this controller's epoch from then on)."""
        with self._lock:
            self._check_active()
            new = Controller(epoch=self.epoch + 1)
            new._store = self._store
            new._brokers, new._alive = dict(self._brokers), set(self._alive)
            new._topics = dict(self._topics)
            new._names_by_id = dict(self._names_by_id)
            new._assignment = {t: dict(a) for t, a in self._assignment.items()}
            new._states = dict(self._states)
            new._pending = {t: dict(a) for t, a in self._pending.items()}
            new._next_producer_id = self._next_producer_id
            new.transaction_coordinator = self.transaction_coordinator
            new._markers = self._markers
            self.transaction_coordinator.new_producer_id = new.new_producer_id
            self._resigned = True
            self._successor = new
            for b in new._brokers.values():
                b.controller = new
        with new._lock:
            new._save_or_defer()
            new._send(new._states)
        return new

    @property
    def current(self) -> Controller:
        """The active controller: this one, or the last of its successors."""
        c = self
        while c._successor is not None:
            c = c._successor
        return c

    @property
    def is_active(self) -> bool:
        return not self._resigned

    def register_broker(self, broker: Broker) -> None:
        """A broker started (or restarted): adopt its topics, then send it its states."""
        with self._lock:
            self._check_active()
            self._brokers[broker.broker_id] = broker
            self._alive.add(broker.broker_id)
            self._adopt_topics(broker)
            self._next_producer_id = max(self._next_producer_id, broker.max_producer_id() + 1)
            changed = {}
            for name, assignment in self._assignment.items():
                broker.log_manager.put_topic(name, self._topics[name]) if any(
                    broker.broker_id in r for r in assignment.values()
                ) else None
                waiting = self._pending.get(name, {})
                for p, replicas in assignment.items():
                    if p in waiting:  # made by the creation's steps
                        continue
                    tp = TopicPartition(name, p)
                    state = self._states.get(tp)
                    if (
                        state is None
                        and self.complete_in_background
                        and broker.log_manager.get_log(tp) is None
                        and not name.startswith("__")  # the coordinators load theirs at once
                    ):
                        self._pending.setdefault(name, {})[p] = replicas
                    elif state is None:
                        changed[tp] = self._initial_state(tp, replicas)
                    elif state.leader == NO_LEADER and (
                        broker.broker_id in state.isr
                        or (broker.broker_id in replicas and self._unclean_allowed(tp))
                    ):
                        changed[tp] = self._elect(tp, state, broker.broker_id)
                    elif broker.broker_id in replicas:
                        changed[tp] = state
            self._states.update(changed)
            self._save_or_defer()
            self._send(changed)
        self.load_transaction_state()

    def _adopt_topics(self, broker: Broker) -> None:
        """Topics found in a broker's log dir that this controller does not know (a standalone
        broker reopening its log dir) are assigned to that broker."""
        for name, entry in broker.log_manager.topics.items():
            if name not in self._topics:
                self._topics[name] = entry
                self._names_by_id[entry.topic_id] = name
                self._assignment[name] = {p: (broker.broker_id,) for p in range(entry.partitions)}

    def _initial_state(self, tp: TopicPartition, replicas: tuple[int, ...]) -> LeaderAndIsr:
        live = tuple(r for r in replicas if r in self._alive)
        leader = live[0] if live else NO_LEADER
        epoch = self._highest_epoch_on_disk(tp, replicas) + 1
        return LeaderAndIsr(leader, epoch, live or replicas[:1], replicas, 0)

    def _highest_epoch_on_disk(self, tp: TopicPartition, replicas: tuple[int, ...]) -> int:
        best = -1
        for r in replicas:
            b = self._brokers.get(r)
            lg = None if b is None else b.log_manager.get_log(tp)
            if lg is not None and lg.leader_epoch_cache.latest_epoch is not None:
                best = max(best, lg.leader_epoch_cache.latest_epoch)
        return best

    def _elect(self, tp: TopicPartition, state: LeaderAndIsr, leader: int) -> LeaderAndIsr:
        isr = state.isr if leader in state.isr else (leader,)
        epoch = max(state.leader_epoch, self._highest_epoch_on_disk(tp, state.replicas)) + 1
        return replace(
            state,
            leader=leader,
            leader_epoch=epoch,
            isr=isr,
            partition_epoch=state.partition_epoch + 1,
        )

    def _unclean_allowed(self, tp: TopicPartition) -> bool:
        config = self._topics[tp.topic].log_config(self._defaults(), tp.topic)
        return config.unclean_leader_election_enable

    def broker_stopped(self, broker_id: int) -> None:
        """Elect new leaders for what ``broker_id`` led; drop it from every ISR. When no broker
        is left alive, the transaction marker writer stops (the next use starts another)."""
        markers = None
        with self._lock:
            self._check_active()
            self._alive.discard(broker_id)
            if not self._alive:
                markers, self._markers = self._markers, None
            changed = {}
            for tp, state in self._states.items():
                if broker_id not in state.replicas:
                    continue
                if state.leader == broker_id:
                    changed[tp] = self._reelect(tp, state, broker_id)
                elif broker_id in state.isr:
                    isr = tuple(b for b in state.isr if b != broker_id)
                    changed[tp] = replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
            self._states.update(changed)
            self._save_or_defer()
            self._send(changed)
        if markers is not None:
            markers.stop()

    def _reelect(self, tp: TopicPartition, state: LeaderAndIsr, gone: int) -> LeaderAndIsr:
        candidates = [r for r in state.replicas if r in state.isr and r in self._alive]
        if not candidates and self._unclean_allowed(tp):
            candidates = [r for r in state.replicas if r in self._alive]
        if not candidates:
            return replace(
                state,
                leader=NO_LEADER,
                leader_epoch=state.leader_epoch + 1,
                partition_epoch=state.partition_epoch + 1,
            )
        new = self._elect(tp, state, candidates[0])
        return replace(new, isr=tuple(b for b in new.isr if b != gone) or (candidates[0],))

    def _defaults(self):
        for b in self._brokers.values():
            return b.config.topic_defaults
        return LogConfig()

    def _remote_storage_enabled(self) -> bool:
        """Kafka's ``remote.log.storage.system.enable`` (of any broker: one config per
        cluster here)."""
        return any(b.config.remote_log_storage_system_enable for b in self._brokers.values())

    def _send(self, states: Mapping[TopicPartition, LeaderAndIsr]) -> None:
        """Send each live replica the states of its partitions, with this controller's epoch."""
        by_broker: dict[int, dict[TopicPartition, LeaderAndIsr]] = {}
        for tp, state in states.items():
            for r in state.replicas:
                if r in self._alive:
                    by_broker.setdefault(r, {})[tp] = state
        for broker_id, mine in by_broker.items():
            self._brokers[broker_id].replica_manager.become_leader_or_follower(self.epoch, mine)

    def replica_manager_of(self, broker_id: int) -> ReplicaManager | None:
        """The replica manager of a live broker (followers fetch through it)."""
        b = self._brokers.get(broker_id)
        return b.replica_manager if b is not None and broker_id in self._alive else None

    # -- topics ------------------------------------------------------------------------------------

    def _check_active(self) -> None:
        if self._resigned:
            raise StaleControllerEpochError(
                f"controller epoch {self.epoch} was replaced by a newer controller"
            )

    def delete_topic(self, name: str) -> None:
        """Delete ``name``, also while its partitions are being made (those waiting are
        dropped)."""
        with self._lock:
            self._check_active()
            self._topic(name)
            self._pending.pop(name, None)
            tps = [TopicPartition(name, p) for p in self._assignment[name]]
            for b in sorted(self._alive):
                broker = self._brokers[b]
                broker.replica_manager.stop_replicas(self.epoch, tps)
                if name in broker.log_manager.topics:
                    broker.log_manager.delete_topic(name)
            for tp in tps:
                self._states.pop(tp, None)
            del self._names_by_id[self._topics[name].topic_id]
            del self._topics[name], self._assignment[name]
            self._save()

    def alter_topic_config(
        self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the config overrides of topic ``name`` with ``overrides`` (validated:
        :class:`InvalidConfigError`), on the brokers hosting it (their log dirs and open logs)
        and in the state file; with ``validate_only`` only check (AlterConfigs'
        ``validate_only``)."""
        with self._lock:
            self._check_active()
            entry = self._topic(name)
            remote = self._remote_storage_enabled()
            config = validate_topic_config(
                self._defaults(),
                overrides,
                name,
                remote_storage_system_enable=remote,
                existing=entry.config,
            )
            if validate_only:
                return
            was = self._defaults().with_overrides(entry.config, name).remote_storage_enable
            new = replace(entry, config=MappingProxyType(dict(overrides)))
            hosts = {b for r in self._assignment[name].values() for b in r} & self._alive
            for b in sorted(hosts):
                self._brokers[b].log_manager.put_topic(name, new)
            self._topics[name] = new
            self._save()
            if was and not config.remote_storage_enable:  # remote.log.delete.on.disable
                tps = [TopicPartition(name, p) for p in self._assignment[name]]
                for b in sorted(hosts):
                    self._brokers[b].replica_manager.remote_storage_disabled(tps)

    def _topic(self, name: str) -> TopicEntry:
        entry = self._topics.get(name)
        if entry is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return entry

    # -- ISR changes from leaders ------------------------------------------------------------------

    def alter_partition(
        self, tp: TopicPartition, broker_id: int, proposal: LeaderAndIsr
    ) -> LeaderAndIsr:
        with self._lock:
            self._check_active()
            state = self._states.get(tp)
            if state is None:
                raise UnknownTopicOrPartitionError(f"{tp} does not exist")
            if state.leader != broker_id or proposal.leader_epoch != state.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{tp}: broker {broker_id} at leader epoch {proposal.leader_epoch} is not the "
                    f"leader (leader {state.leader}, epoch {state.leader_epoch})"
                )
            if proposal.partition_epoch != state.partition_epoch:
                raise InvalidUpdateVersionError(
                    f"{tp}: partition epoch {proposal.partition_epoch} is stale (now "
                    f"{state.partition_epoch})"
                )
            dead = [b for b in proposal.isr if b not in self._alive]
            if dead:
                raise IneligibleReplicaError(f"{tp}: brokers {dead} are stopped")
            committed = replace(state, isr=proposal.isr, partition_epoch=state.partition_epoch + 1)
            self._states[tp] = committed
            try:
                self._save()
            except KafkaStorageError:  # not on disk: not committed (module docstring)
                self._states[tp] = state
                raise
            return committed

    # -- producer ids ------------------------------------------------------------------------------

    def transaction_markers(self) -> TransactionMarkerWriter:
        """The background writer of the transaction coordinator's markers (started on first
        use; shared with successors, writing through whichever controller is current)."""
        with self._lock:
            if self._markers is None:
                self._markers = TransactionMarkerWriter(
                    self.transaction_coordinator,
                    lambda tp, completion: self.current.write_marker(tp, completion),
                )
                self._markers.start()
            return self._markers

    def write_marker(self, tp: TopicPartition, completion: TxnCompletion) -> None:
        """Append ``completion``'s marker to ``tp`` on its leader (acks=all); raises what
        the append fails with (NOT_LEADER_OR_FOLLOWER without a live leader)."""
        self.append_to_leader(tp, completion.marker_batch(wall_clock_ms()))

    def append_to_leader(self, tp: TopicPartition, batch: bytes) -> None:
        """Append a coordinator's batch to ``tp`` on its leader (acks=all); raises what the
        append fails with (NOT_LEADER_OR_FOLLOWER without a live leader)."""
        state = self.partition_state(tp)
        with self._lock:
            broker = self._brokers.get(state.leader) if state.leader in self._alive else None
        if broker is None:
            raise NotLeaderOrFollowerError(f"{tp} has no live leader for a coordinator write")
        broker.append(tp, batch, acks="all", origin=AppendOrigin.COORDINATOR).raise_error()

    # -- transaction state (__transaction_state) ---------------------------------------------------

    def use_transaction_log(self) -> None:
        """From now on the transaction coordinator persists its state in
        ``__transaction_state`` (created on its first write); what the topic holds is loaded
        first (idempotent: the wire API's servers call it when they start)."""
        with self._lock:
            self._transaction_log_store()
        self.load_transaction_state()

    def _transaction_log_store(self) -> None:
        coordinator = self.transaction_coordinator
        if isinstance(coordinator.store, LogTransactionStore):
            return
        coordinator.store = LogTransactionStore(
            lambda: self.current.transaction_log_partitions(),
            lambda tp, batch: self.current.append_to_leader(tp, batch),
            loaded=lambda p: p in coordinator.loaded,
        )

    def transaction_log_partitions(self, wait_s: float = CREATE_WAIT_S) -> int:
        """The partition count of ``__transaction_state``. When it does not exist, it is
        created in the background (its empty partitions count as loaded), waiting at most
        ``wait_s``: still being created then is COORDINATOR_NOT_AVAILABLE, which clients retry
        (creating 50 partitions takes seconds, longer than a client's request timeout; Kafka's
        FindCoordinator answers the same while it creates the topic). The creation holds the
        controller's lock, so this waits on the creating thread, not on that lock."""
        with self._txn_topic_lock:
            creator = self._txn_topic_creator
            if creator is None or (
                not creator.is_alive() and TRANSACTION_STATE_TOPIC not in self._topics
            ):  # a membership read of the topics (atomic), not to wait behind the creation
                creator = self._txn_topic_creator = threading.Thread(
                    target=self._create_transaction_log,
                    name="transaction-state-topic",
                    daemon=True,
                )
                creator.start()
        creator.join(wait_s)
        if not creator.is_alive():
            with self._lock:
                if TRANSACTION_STATE_TOPIC in self._topics:
                    return len(self._assignment[TRANSACTION_STATE_TOPIC])
        raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} is being created; retry")

    def _create_transaction_log(self) -> None:
        try:
            with self._lock:
                config = next(iter(self._brokers.values())).config
                existed = TRANSACTION_STATE_TOPIC in self._topics
                topic = ensure_topic(self, transaction_state_topic(config), len(self._alive))
            if not existed:
                with self.transaction_coordinator.lock:
                    self.transaction_coordinator.loaded.update(range(len(topic.partitions)))
        except Exception:  # the next write tries again
            log.exception("creating %s", TRANSACTION_STATE_TOPIC)

    def load_transaction_state(self) -> None:
        """Load every partition of ``__transaction_state`` that a live broker leads and that
        is not loaded yet (Kafka loads a partition when its broker becomes its leader): the
        coordinator persists its state there from then on, prepared transactions are
        completed by the marker writer, and producer ids continue above the loaded ones.
        Nothing when the topic does not exist. Called when a broker opens."""
        coordinator = self.transaction_coordinator
        with self._lock:
            if TRANSACTION_STATE_TOPIC not in self._topics:
                return
            self._transaction_log_store()
            todo = []
            for p in sorted(self._assignment[TRANSACTION_STATE_TOPIC]):
                state = self._states.get(TopicPartition(TRANSACTION_STATE_TOPIC, p))
                if state is not None and state.leader in self._alive:
                    todo.append((p, self._brokers[state.leader]))
        with coordinator.lock:
            todo = [(p, broker) for p, broker in todo if p not in coordinator.loaded]
        for p, broker in todo:
            lg = broker.log_manager.get_log(TopicPartition(TRANSACTION_STATE_TOPIC, p))
            values = {} if lg is None else load_partition(p, read_log(lg))
            if values:
                with self._lock:
                    highest = max(v.producer_id for v in values.values())
                    if highest >= self._next_producer_id:
                        self._next_producer_id = highest + 1
                        self._save()
            completions = coordinator.load(p, values)
            if values:  # started: it completes the prepared ones and expires the open ones
                markers = self.transaction_markers()
                for completion in completions:
                    markers.submit(completion)

    def transaction_state_loaded(self) -> bool:
        """Whether every partition of ``__transaction_state`` is loaded (True without it)."""
        with self._lock:
            if TRANSACTION_STATE_TOPIC not in self._topics:
                return True
            partitions = set(self._assignment[TRANSACTION_STATE_TOPIC])
        with self.transaction_coordinator.lock:
            return partitions <= self.transaction_coordinator.loaded

    def live_brokers(self) -> int:
        """How many brokers are alive now."""
        with self._lock:
            return len(self._alive)

    def new_producer_id(self) -> int:
        """A producer id never handed out before (Kafka's ``ProducerIdManager``), kept across
        restarts with the controller's state."""
        with self._lock:
            self._check_active()
            pid = self._next_producer_id
            self._next_producer_id += 1
            try:
                self._save()
            except KafkaStorageError:  # never hand out an id a restart could hand out again
                self._next_producer_id = pid
                raise
            return pid

    # -- metadata ----------------------------------------------------------------------------------

    def knows(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` exists (also while its log waits to be made)."""
        with self._lock:
            return tp in self._states or tp.partition in self._pending.get(tp.topic, ())

    def partition_state(self, tp: TopicPartition) -> LeaderAndIsr:
        with self._lock:
            state = self._states.get(tp)
            if state is None:
                raise UnknownTopicOrPartitionError(
                    f"topic {tp.topic!r} partition {tp.partition} does not exist"
                )
            return state

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._topics)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id`` (None: no topic has it); a dict lookup, the
        map kept with the topics on creation and deletion."""
        with self._lock:
            return self._names_by_id.get(topic_id)

    def describe(self, name: str) -> TopicMetadata:
        with self._lock:
            self._topic(name)
            return self._describe(name)

    def _describe(self, name: str) -> TopicMetadata:
        entry = self._topics[name]
        parts = []
        for p, replicas in sorted(self._assignment[name].items()):
            s = self._states.get(TopicPartition(name, p))
            if s is None:  # its log waits to be made: no leader yet (LEADER_NOT_AVAILABLE)
                offline = tuple(r for r in replicas if r not in self._alive)
                parts.append(PartitionMetadata(p, NO_LEADER, -1, replicas, (), offline))
                continue
            offline = tuple(r for r in s.replicas if r not in self._alive)
            parts.append(PartitionMetadata(p, s.leader, s.leader_epoch, s.replicas, s.isr, offline))
        return TopicMetadata(name, entry.topic_id, tuple(parts), entry.config)

    def metadata(self, topics: list[str] | None = None) -> list[TopicMetadata]:
        with self._lock:
            names = self.topics() if topics is None else topics
            return [self.describe(n) for n in names]


__all__ = ["Controller", "KafkaApiError"]
