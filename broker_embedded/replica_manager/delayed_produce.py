"""A produce with acks=all waiting for replication (Kafka's ``DelayedProduce``).

Each partition of the request waits until its high watermark reaches the offset after its last
appended record. A partition completes early with an error when its leader moved
(NOT_LEADER_OR_FOLLOWER) or its ISR shrank below ``min.insync.replicas``
(NOT_ENOUGH_REPLICAS_AFTER_APPEND); when ``timeout_ms`` runs out, the partitions still waiting
get REQUEST_TIMED_OUT. The records stay in the leader's log whatever the answer, as in Kafka.

``respond`` (optional) receives the per-partition errors once the operation completes, in the
thread that completes it (the appending handler, a thread whose append or ISR change woke it, or
the purgatory's reaper): the network layer answers from there, so no thread sleeps waiting.

Thread safety: the purgatory serializes ``try_complete``; the per-partition check takes the
partition's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from broker_embedded.common.purgatory import DelayedOperation
from broker_embedded.errors import KafkaApiError, RequestTimedOutError
from broker_embedded.storage.topic_partition import TopicPartition

Check = Callable[[TopicPartition, int], "KafkaApiError | None | bool"]
Errors = dict[TopicPartition, "KafkaApiError | None"]


class DelayedProduce(DelayedOperation):
    """``required`` maps each partition to the offset its HW must reach; ``check(tp, offset)``
    answers ``None`` (done), an error (done, failed) or ``False`` (still waiting)."""

    def __init__(
        self,
        timeout_ms: int,
        required: Mapping[TopicPartition, int],
        check: Check,
        respond: Callable[[Errors], None] | None = None,
    ):
        super().__init__(timeout_ms)
        self.required = dict(required)
        self._check = check
        self._respond = respond
        self.errors: Errors = {}

    def try_complete(self) -> bool:
        for tp, offset in self.required.items():
            if tp not in self.errors:
                result = self._check(tp, offset)
                if result is not False:
                    self.errors[tp] = result  # type: ignore[assignment]
        if len(self.errors) == len(self.required):
            return self.force_complete()
        return False

    def on_complete(self) -> Errors:
        for tp, offset in self.required.items():
            if tp not in self.errors:
                self.errors[tp] = RequestTimedOutError(
                    f"topic {tp.topic!r} partition {tp.partition}: offset {offset - 1} was not "
                    f"replicated to the ISR within {self.delay_ms} ms (acks=all)"
                )
        errors = dict(self.errors)
        if self._respond is not None:
            self._respond(errors)
        return errors
