"""Per-topic counters of one broker (Kafka's ``BrokerTopicStats``) and its ISR change counts,
kept only while something reads them (``ReplicaManager.topic_stats`` is None by default; the
metrics endpoint of ``kafkalog serve --metrics-port`` sets one).

What is counted, and where (as Kafka's ``ReplicaManager`` and ``KafkaApis`` count them):
- produce, per partition of a Produce (or an internal append): ``total_produce`` +1; on success
  ``messages_in`` + the batch's record count (last offset - base offset + 1) and ``bytes_in`` +
  the record batch's bytes as appended (the request's ``records`` field; a retried duplicate adds
  nothing, since nothing is appended); on an error ``failed_produce`` +1;
- fetch, per partition a consumer's Fetch reads: ``total_fetch`` +1, ``failed_fetch`` +1 on an
  error; ``bytes_out`` + the records bytes of the partition in the response sent (counted once,
  when the response is built, also after a wait in the purgatory);
- ``isr_shrinks`` / ``isr_expands``: +1 per ISR change committed by the controller that made
  the ISR smaller / larger;
- tiered storage (Kafka's ``RemoteStorageMetrics`` meters, counted by the remote log manager
  through :meth:`BrokerTopicStats.add`, as Kafka's ``RemoteLogManager``, ``RemoteLogReader`` and
  ``TierStateMachine`` mark them): per segment copy ``remote_copy_requests`` +1, on success
  ``remote_copy_bytes`` + its ``.log``'s size, on a failure ``remote_copy_errors`` +1; per
  remote read of a consumer's Fetch ``remote_fetch_requests`` +1, ``remote_fetch_bytes`` + the
  records bytes read, ``remote_fetch_errors`` +1 when the store failed (not for an offset out
  of range); per stored segment deleted (retention, a deleted topic, tiering turned off)
  ``remote_delete_requests`` +1 once it is marked, ``remote_delete_errors`` +1 when its
  deletion failed; per follower restart from the store ``build_remote_log_aux_state_requests``
  +1, ``build_remote_log_aux_state_errors`` +1 when it failed.

Layout: one list of :data:`FIELDS` ints per topic, made the first time the topic is counted,
and one for all topics; so counting a request costs a dict lookup and a few integer additions
under one lock, no object per record or per request. Counters only grow; a deleted topic keeps
its row (a Prometheus counter must not go back).

Limit: at most :data:`MAX_TOPICS` topic rows; the counts of further topics go to the all-topics
row only (one warning), so a client creating topics without end cannot grow this without end.

Thread safety: every method takes the object's lock; :meth:`snapshot` copies the rows.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

FIELDS = (
    "messages_in",
    "bytes_in",
    "bytes_out",
    "total_produce",
    "failed_produce",
    "total_fetch",
    "failed_fetch",
    "remote_copy_bytes",
    "remote_copy_requests",
    "remote_copy_errors",
    "remote_fetch_bytes",
    "remote_fetch_requests",
    "remote_fetch_errors",
    "remote_delete_requests",
    "remote_delete_errors",
    "build_remote_log_aux_state_requests",
    "build_remote_log_aux_state_errors",
)
MESSAGES_IN, BYTES_IN, BYTES_OUT, TOTAL_PRODUCE, FAILED_PRODUCE, TOTAL_FETCH, FAILED_FETCH = range(
    7
)
_INDEX = {name: i for i, name in enumerate(FIELDS)}
MAX_TOPICS = 100_000


class BrokerTopicStats:
    """The counters (module docstring)."""

    def __init__(self, max_topics: int = MAX_TOPICS) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, list[int]] = {}
        self._all = [0] * len(FIELDS)
        self._max_topics = max_topics
        self._warned = False
        self.isr_shrinks = 0
        self.isr_expands = 0

    def _row(self, topic: str) -> list[int] | None:
        """Under the lock: the topic's row (None past the limit)."""
        row = self._topics.get(topic)
        if row is None:
            if len(self._topics) >= self._max_topics:
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "topic metrics kept for %d topics only; %r and later topics are "
                        "counted in the all-topics totals",
                        self._max_topics,
                        topic,
                    )
                return None
            row = self._topics[topic] = [0] * len(FIELDS)
        return row

    def _add(self, topic: str, *amounts: tuple[int, int]) -> None:
        """Add each (field, amount) to the topic's row and the all-topics row."""
        with self._lock:
            row = self._row(topic)
            for field, amount in amounts:
                self._all[field] += amount
                if row is not None:
                    row[field] += amount

    def appended(self, topic: str, messages: int, size: int) -> None:
        """A produce to a partition of ``topic`` appended ``messages`` records in ``size``
        batch bytes."""
        self._add(topic, (TOTAL_PRODUCE, 1), (MESSAGES_IN, messages), (BYTES_IN, size))

    def produce_failed(self, topic: str) -> None:
        self._add(topic, (TOTAL_PRODUCE, 1), (FAILED_PRODUCE, 1))

    def fetched(self, topic: str, failed: bool, size: int) -> None:
        """A consumer's fetch read a partition of ``topic`` (``failed``: with an error) and
        put ``size`` records bytes into the response."""
        self._add(topic, (TOTAL_FETCH, 1), (FAILED_FETCH, int(failed)), (BYTES_OUT, size))

    def add(self, topic: str, **amounts: int) -> None:
        """Add to :data:`FIELDS` by name (the tiered storage meters: once per segment or remote
        read, not a hot path)."""
        self._add(topic, *((_INDEX[name], amount) for name, amount in amounts.items()))

    def isr_changed(self, before: int, after: int) -> None:
        """A committed ISR change from ``before`` to ``after`` replicas."""
        with self._lock:
            if after < before:
                self.isr_shrinks += 1
            elif after > before:
                self.isr_expands += 1

    def snapshot(self) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
        """(all-topics counts, counts by topic), each in :data:`FIELDS` order."""
        with self._lock:
            return tuple(self._all), {t: tuple(row) for t, row in self._topics.items()}
