"""A scenario: a sequence of requests run against one server, its answers recorded.

:class:`Run` holds one connection and the answers (:class:`Exchange`, labelled by the step)
of one server; :func:`compare` runs a scenario against Kafka and kafkalog with the same fresh
topic names and returns the differences of the normalized answers, step by step.

Setup steps that are not compared (creating a topic and waiting for its leader) go through
:meth:`Run.quiet`. Every wait is bounded (:data:`READY_TIMEOUT_S`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import Record
from tests.differential.harness import Connection, Difference, Login, Normalizer, diff

READY_TIMEOUT_S = 30.0
BASE_TIMESTAMP = 1_700_000_000_000
LIST_OFFSETS_KEY, METADATA_KEY, CREATE_TOPICS_KEY = 2, 3, 19
T = TypeVar("T")
LOADING = frozenset(
    {"coordinator_not_available", "not_coordinator", "coordinator_load_in_progress"}
)


@dataclasses.dataclass(frozen=True)
class Exchange:
    label: str
    api_key: int
    version: int
    answer: Any


class Run:
    """One server's side of a scenario: its connection, the topic names, the answers."""

    def __init__(self, bootstrap: str, token: str, login: Login | None = None) -> None:
        self.bootstrap = bootstrap
        self.token = token
        self.conn = Connection(bootstrap, login=login)
        self._more: list[Connection] = []
        self.exchanges: list[Exchange] = []

    def topic(self, name: str) -> str:
        """A topic (or group, transactional id) name of this scenario run, fresh per run."""
        return f"diff-{name}-{self.token}"

    def call(
        self,
        label: str,
        api_key: int,
        version: int,
        values: dict[str, Any],
        view: Callable[[Any], Any] | None = None,
    ) -> Any:
        """One compared request; its plain answer (``view`` shapes what is recorded)."""
        answer = self.conn.call(api_key, version, values)
        recorded = answer if view is None else view(answer)
        self.exchanges.append(Exchange(label, api_key, version, recorded))
        return answer

    def until(
        self,
        label: str,
        api_key: int,
        version: int,
        values: dict[str, Any],
        retriable: frozenset[str] = LOADING,
        error: Callable[[Any], str] = lambda answer: answer["error_code"],
    ) -> Any:
        """A compared request repeated while its ``error(answer)`` (default: the top-level
        ``error_code``) is ``retriable`` (default: a coordinator not there yet or still
        loading), as clients retry; only the last answer is recorded."""

        def settled() -> Any:
            answer = self.quiet(api_key, version, values)
            return None if error(answer) in retriable else answer

        answer = self.poll(f"{label}: still {sorted(retriable)}", settled)
        self.exchanges.append(Exchange(label, api_key, version, answer))
        return answer

    def poll(self, what: str | Callable[[], str], probe: Callable[[], T | None]) -> T:
        """``probe()`` repeated until it returns something other than None, which is returned;
        after :data:`READY_TIMEOUT_S`, an AssertionError naming the server and ``what`` (or
        ``what()``, said after the last probe). The one wait of the scenarios: setup, and
        requests repeated as clients retry them."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (found := probe()) is None:
            if time.monotonic() > deadline:
                said = what if isinstance(what, str) else what()
                raise AssertionError(f"{self.bootstrap}: {said}")
            time.sleep(0.05)
        return found

    def quiet(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """One request whose answer is not compared (setup)."""
        return self.conn.call(api_key, version, values)

    def create(
        self, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        """Create ``topic`` (not compared) and wait until every partition has a leader. Its
        ``retention.ms`` is -1 unless ``configs`` say otherwise: the scenarios' records carry
        timestamps of 2023 (:data:`BASE_TIMESTAMP`), which a retention check falling inside a
        scenario (every 5 minutes in Kafka) would delete, active segment included."""
        configs = {"retention.ms": "-1", **(configs or {})}
        answer = self.quiet(
            CREATE_TOPICS_KEY,
            7,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    }
                ],
                "timeout": 30_000,
            },
        )
        error = answer["topics"][0]["error_code"]
        assert error == "none", f"creating {topic} on {self.bootstrap}: {error}"
        self.wait_ready(topic, partitions)

    def topic_id(self, topic: str) -> str:
        """The topic's id, as Metadata names it (not compared)."""
        answer = self.quiet(
            METADATA_KEY,
            12,
            {
                "topics": [{"name": topic, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        return answer["topics"][0]["topic_id"]

    def wait_ready(self, topic: str, partitions: int) -> None:
        """Until Metadata names a leader for each of the topic's ``partitions``."""
        last: list[Any] = []

        def ready() -> bool | None:
            answer = self.quiet(
                METADATA_KEY,
                12,
                {
                    "topics": [{"name": topic, "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False,
                },
            )
            found = answer["topics"][0]
            last[:] = [found]
            led = [p for p in found["partitions"] if p["leader_id"] >= 0]
            return (
                found["error_code"] == "none" and len(led) == partitions and self._led(topic)
            ) or None

        self.poll(lambda: f"{topic} not ready: {last}", ready)

    def connect(self, login: Login | None = None) -> Connection:
        """One more connection (a second group member whose request waits while the first
        one's are answered; another user, ``login``); closed with the run."""
        self._more.append(Connection(self.bootstrap, login=login))
        return self._more[-1]

    def call_on(
        self, label: str, conn: Connection, api_key: int, version: int, values: dict[str, Any]
    ) -> Any:
        """One compared request on another connection (:meth:`connect`)."""
        return self.receive(label, conn, conn.send(api_key, version, values))

    def receive(self, label: str, conn: Connection, sent: tuple[int, int, int]) -> Any:
        """The answer to a request sent earlier on ``conn`` (``conn.send``), recorded."""
        answer = conn.receive(sent)
        self.exchanges.append(Exchange(label, sent[0], sent[1], answer))
        return answer

    def _led(self, topic: str) -> bool:
        """Whether every partition answers ListOffsets (Kafka's Metadata names a leader before
        the broker leads the partition: NOT_LEADER_OR_FOLLOWER meanwhile)."""
        answer = self.quiet(
            LIST_OFFSETS_KEY,
            9,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "current_leader_epoch": -1,
                                "timestamp": -1,
                            }
                            for p in self._partitions(topic)
                        ],
                    }
                ],
            },
        )
        return all(p["error_code"] == "none" for p in answer["topics"][0]["partitions"])

    def _partitions(self, topic: str) -> list[dict[str, Any]]:
        answer = self.quiet(
            METADATA_KEY,
            12,
            {
                "topics": [{"name": topic, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        return answer["topics"][0]["partitions"]

    def close(self) -> None:
        for conn in [self.conn, *self._more]:
            conn.close()


Scenario = Callable[[Run], None]


@dataclasses.dataclass(frozen=True)
class StepDifference:
    label: str
    api_key: int
    version: int
    difference: Difference

    def key(self) -> tuple[str, str, Any, Any]:
        d = self.difference
        return (self.label, d.path, d.kafka, d.kafkalog)


@dataclasses.dataclass(frozen=True)
class Comparison:
    kafka: list[Exchange]
    kafkalog: list[Exchange]
    differences: list[StepDifference]


def run_on(
    scenario: Scenario, bootstrap: str, token: str, login: Login | None = None
) -> list[Exchange]:
    """The normalized answers of ``scenario`` on one server."""
    run = Run(bootstrap, token, login)
    try:
        scenario(run)
    finally:
        run.close()
    normalize = Normalizer()
    return [dataclasses.replace(e, answer=normalize(e.answer)) for e in run.exchanges]


def compare(
    scenario: Scenario, kafka: str, kafkalog: str, login: Login | None = None
) -> Comparison:
    """``scenario`` on Kafka (``kafka``, a bootstrap address) and kafkalog, same fresh names;
    ``login``: the user the scenario's first connection authenticates as."""
    token = uuid.uuid4().hex[:8]
    ours = run_on(scenario, kafkalog, token, login)
    theirs = run_on(scenario, kafka, token, login)
    labels = [e.label for e in theirs]
    assert labels == [e.label for e in ours], "the two runs took different steps"
    found = [
        StepDifference(
            a.label, a.api_key, a.version, dataclasses.replace(d, path=d.path.replace(token, "*"))
        )
        for a, b in zip(theirs, ours, strict=True)
        for d in diff(a.answer, b.answer)
    ]
    return Comparison(theirs, ours, found)


# -- record batches ----------------------------------------------------------------------------


def batch(
    values: list[bytes],
    *,
    compression: int = 0,
    timestamp: int = BASE_TIMESTAMP,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One v2 batch of ``values`` (keys ``k<i>``, a header on the first record), timestamps
    ``timestamp + i``."""
    builder = MemoryRecordsBuilder(
        0,
        compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    for i, value in enumerate(values):
        headers = (("h", b"v"),) if i == 0 else ()
        builder.append_record(Record(i, timestamp + i, f"k{i}".encode(), value, headers))
    return builder.build()
