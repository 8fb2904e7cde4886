"""Kafka transactions over the wire, split between the processes that produce and the one that
ends them (the protocol sink's exactly once, datasource/wire_writer.py; Flink's KafkaSink
commits the same way).

A :class:`TransactionalWireProducer` is an idempotent producer (idempotent_producer.py) with a
transactional id: its constructor sends InitProducerId with that id to the id's transaction
coordinator (FindCoordinator key type 1), which bumps the id's epoch, fences every earlier
instance and aborts the transaction an earlier instance left open (the coordinator answers
CONCURRENT_TRANSACTIONS until that abort's markers are written: retried). Each partition is
added to the transaction (AddPartitionsToTxn) before its first batch; batches are transactional
(attribute bit 4) and carry the transactional id in the Produce request.
:meth:`TransactionalWireProducer.commit_offset` puts an offset commit of a group into the same
transaction (AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
group's coordinator): it becomes visible if and only if the transaction commits.

The producer does not end its transaction: :attr:`TransactionalWireProducer.handle` (transactional
id, producer id, epoch; a frozen, picklable :class:`TxnHandle`) is all :func:`end_txn` needs to
send EndTxn COMMIT or ABORT from any process and connection. EndTxn of a transaction already
ended that way is answered without error (Kafka's retry rule), so ending twice is harmless; a
transaction that was aborted meanwhile (its ``transaction.timeout.ms`` passed, or a newer
instance fenced it) fails the COMMIT with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH /
INVALID_TXN_STATE (the domain error naming the transactional id).

:func:`committed_offset` reads a group's committed offset with OffsetFetch ``require_stable``
(v7+): while a transaction with offsets of that group is pending, Kafka answers
UNSTABLE_OFFSET_COMMIT (88), retried until it is decided.

Limits: every retry loop (CONCURRENT_TRANSACTIONS, UNSTABLE_OFFSET_COMMIT) stops at the client's
``retry_timeout_s`` and then raises the last error; coordinator moves are the client's
(``KafkaClient.to_coordinator``). Not thread-safe: one producer per thread (as its client).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from broker_embedded.client.broker_connection import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
    BrokerConnection,
)
from broker_embedded.client.idempotent_producer import IdempotentProducer
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import KafkaApiError, api_error
from broker_embedded.record.columnar_encoder import EncodedBatches

TXN_COORDINATOR = 1  # FindCoordinator key type of a transactional id
NO_OFFSET = -1  # OffsetFetch: no commit
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TxnHandle:
    """What EndTxn needs of an open transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _retrying(client: KafkaClient, code: int, action: Callable[[], T]) -> T:
    """``action()``, again while it raises the API error ``code`` (within the client's
    ``retry_timeout_s``, ``retry_backoff_s`` apart)."""
    deadline = time.monotonic() + client.config.retry_timeout_s
    while True:
        try:
            return action()
        except KafkaApiError as e:
            if e.code != code or time.monotonic() + client.config.retry_backoff_s > deadline:
                raise
        time.sleep(client.config.retry_backoff_s)


def _to_txn_coordinator(
    client: KafkaClient, transactional_id: str, api_key: int, what: str, values: dict[str, Any]
) -> Any:
    """One request to ``transactional_id``'s coordinator; its top-level error raised."""

    def call(c: BrokerConnection) -> Any:
        response = c.request(api_key, lambda _: values)
        if response.error_code != ErrorCode.none:
            where = f"{what} of transactional id {transactional_id!r} on {c.address}"
            raise api_error(int(response.error_code), where)
        return response

    return client.to_coordinator(transactional_id, call, key_type=TXN_COORDINATOR)


class TransactionalWireProducer(IdempotentProducer):
    """See the module docstring. ``client`` stays the caller's (not closed here)."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        *,
        timeout_ms: int = 30_000,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._added: set[tuple[str, int]] = set()
        super().__init__(client, timeout_ms=timeout_ms)

    def _init_producer_id(self) -> tuple[int, int]:
        tid = self.transactional_id
        assert tid is not None
        timeout = timedelta(milliseconds=self.transaction_timeout_ms)
        values = {
            "transactional_id": tid,
            "producer_id": -1,
            "producer_epoch": -1,
            "transaction_timeout": timeout,
        }
        response = _retrying(
            self.client,
            ErrorCode.concurrent_transactions,
            lambda: _to_txn_coordinator(
                self.client, tid, INIT_PRODUCER_ID, "InitProducerId", values
            ),
        )
        return int(response.producer_id), int(response.producer_epoch)

    @property
    def handle(self) -> TxnHandle:
        assert self.transactional_id is not None
        return TxnHandle(self.transactional_id, self.producer_id, self.producer_epoch)

    def _fenced(self) -> dict[str, Any]:
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
        }

    def fields(self, topic: str, partition: int) -> dict[str, int]:
        return {**super().fields(topic, partition), "is_transactional": True}

    def send(self, topic: str, partition: int, encoded: EncodedBatches) -> Any:
        if len(encoded) and (topic, partition) not in self._added:
            self._add_partition(topic, partition)
        return super().send(topic, partition, encoded)

    def _add_partition(self, topic: str, partition: int) -> None:
        tid = self.transactional_id
        assert tid is not None

        def call(c: BrokerConnection) -> None:
            response = c.request(
                ADD_PARTITIONS_TO_TXN,
                lambda types: {
                    "v3_and_below_transactional_id": tid,
                    "v3_and_below_producer_id": self.producer_id,
                    "v3_and_below_producer_epoch": self.producer_epoch,
                    "v3_and_below_topics": (
                        types.AddPartitionsToTxnTopic(name=topic, partitions=(partition,)),
                    ),
                },
            )
            for t in response.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    if p.partition_error_code != ErrorCode.none:
                        raise api_error(
                            int(p.partition_error_code),
                            f"AddPartitionsToTxn of topic {topic!r} partition "
                            f"{partition} to transactional id {tid!r}",
                        )

        _retrying(
            self.client,
            ErrorCode.concurrent_transactions,
            lambda: self.client.to_coordinator(tid, call, key_type=TXN_COORDINATOR),
        )
        self._added.add((topic, partition))

    def commit_offset(self, group_id: str, topic: str, partition: int, offset: int) -> None:
        """``group_id``'s commit of ``offset`` for ``topic``/``partition``, in the transaction."""
        tid = self.transactional_id
        assert tid is not None
        _retrying(
            self.client,
            ErrorCode.concurrent_transactions,
            lambda: _to_txn_coordinator(
                self.client,
                tid,
                ADD_OFFSETS_TO_TXN,
                "AddOffsetsToTxn",
                {**self._fenced(), "group_id": group_id},
            ),
        )

        def call(c: BrokerConnection) -> None:
            response = c.request(
                TXN_OFFSET_COMMIT,
                lambda types: {
                    **self._fenced(),
                    "group_id": group_id,
                    "generation_id": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": (
                        types.TxnOffsetCommitRequestTopic(
                            name=topic,
                            partitions=(
                                types.TxnOffsetCommitRequestPartition(
                                    partition_index=partition,
                                    committed_offset=offset,
                                    committed_leader_epoch=-1,
                                    committed_metadata=None,
                                ),
                            ),
                        ),
                    ),
                },
            )
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise api_error(
                            int(p.error_code),
                            f"TxnOffsetCommit of group {group_id!r} for topic "
                            f"{topic!r} partition {partition} in transactional id "
                            f"{tid!r} on {c.address}",
                        )

        self.client.to_coordinator(group_id, call)


def end_txn(client: KafkaClient, handle: TxnHandle, *, commit: bool) -> None:
    """EndTxn COMMIT or ABORT of ``handle``'s transaction (module docstring)."""
    values = {
        "transactional_id": handle.transactional_id,
        "producer_id": handle.producer_id,
        "producer_epoch": handle.producer_epoch,
        "committed": commit,
    }
    what = f"EndTxn {'COMMIT' if commit else 'ABORT'}"
    _retrying(
        client,
        ErrorCode.concurrent_transactions,
        lambda: _to_txn_coordinator(client, handle.transactional_id, END_TXN, what, values),
    )


def committed_offset(client: KafkaClient, group_id: str, topic: str, partition: int) -> int:
    """``group_id``'s committed offset of ``topic``/``partition`` once no transaction holding
    one is pending (``require_stable``); :data:`NO_OFFSET` when it has none."""
    tp = (topic, partition)
    return _retrying(
        client,
        ErrorCode.unstable_offset_commit,
        lambda: client.committed_offsets(group_id, [tp], require_stable=True).get(tp, NO_OFFSET),
    )
