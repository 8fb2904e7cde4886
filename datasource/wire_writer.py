"""The ``kafkalog`` sink over the Kafka protocol: ``df.write.format("kafkalog")`` and
``df.writeStream.format("kafkalog")`` with the option ``kafka.bootstrap.servers`` (and no path)
produce the rows to a cluster (``kafkalog serve``, Apache Kafka, any Kafka-compatible broker)
with the project's wire client and an idempotent producer (acks=all); with the option
``transactionalIdPrefix``, in Kafka transactions, exactly once.

Columns, their types and the errors naming a column of a wrong type are the log-dir writer's
(kafka_row_writer.py :func:`check_columns`), as is the placement of a row without a partition
(:class:`RowPlacer`: a keyed row where Kafka's default partitioner puts it, murmur2 of the key;
keyless rows round-robin per task) and the batches (the columnar encoder, Arrow columns straight
into record batches v2, no Python object per record; at most 1 MiB of records and the topic's
``max.message.bytes`` each). A record's CreateTime is its ``timestamp`` column value, or the
task's wall-clock time (write_timestamps.py). Partition counts come from Metadata, the topic's
``max.message.bytes`` and ``cleanup.policy`` from DescribeConfigs (Kafka's defaults when the
cluster does not answer it).

Options: ``kafka.bootstrap.servers`` (``host:port,...``, required here; with ``path`` too it is
an error that says to pick one), ``topic`` (as for a log dir), ``transactionalIdPrefix``
(kafka_write_options.py), ``kafka.transaction.timeout.ms`` (the tasks' transactions' timeout,
default :data:`DEFAULT_TXN_TIMEOUT_MS`), the client's settings ``kafka.client.id``,
``kafka.request.timeout.ms``, ``kafka.socket.connection.setup.timeout.ms``,
``kafka.retry.backoff.ms``, ``kafka.default.api.timeout.ms``. ``kafka.acks`` must be ``all`` or
``-1`` (an idempotent producer, as Kafka's producer requires); ``kafka.key.serializer`` and
``kafka.value.serializer`` are rejected with Spark's messages; ``kafka.security.protocol``,
``kafka.ssl.*`` and ``kafka.sasl.*`` go to the client as for the source; other ``kafka.*``
producer settings are accepted with a warning that they have no effect.

Without ``transactionalIdPrefix``: AT LEAST ONCE, as Spark's Kafka sink. Each task is one
producer session (a producer id of its own, a sequence per partition): within it a batch retried
after a broken connection or a moved leader is not appended twice
(broker_embedded/client/idempotent_producer.py). But a task Spark retries, and a micro-batch
Spark runs again after a failure (the query restarted from its checkpoint when the batch's
offsets were logged and its commit was not), produces its rows again under a new producer id:
the topic then holds those rows twice. What a failed batch job produced before it failed stays
in the topic (Kafka has no undo; ``abort`` logs it).

With ``transactionalIdPrefix`` P: EXACTLY ONCE for read_committed readers
(broker_embedded/client/wire_transactions.py). Task of partition ``i`` (Spark's
``TaskContext.partitionId()``):
 1. InitProducerId with transactional id ``P-i``: fences every earlier producer of ``P-i`` (an
    earlier attempt of this task, or this task in the run of the batch before a crash) and
    aborts the transaction it left open.
 2. In a streaming query (Spark's local properties ``streaming.sql.batchId`` B and
    ``sql.streaming.queryId`` Q are set): OffsetFetch (require_stable) of group ``P-i-Q``,
    topic option T partition 0. A committed offset >= B means this task's transaction of batch
    B was committed before a crash: the task reads its input and produces nothing (its message
    carries no transaction). Step 1 returns only once the id's previous transaction is
    complete, and Kafka (and ``kafkalog serve``) answers OffsetFetch require_stable with
    UNSTABLE_OFFSET_COMMIT (retried) while offsets of a transaction are pending, that is until
    the transaction's marker is in the group's ``__consumer_offsets`` partition.
 3. Produces its rows in the transaction (AddPartitionsToTxn before a partition's first batch;
    transactional batches), and in a streaming query also commits offset B for group
    ``P-i-Q`` on T-0 in it (AddOffsetsToTxn, TxnOffsetCommit): the batch's id becomes visible
    exactly when its rows do.
 4. Returns (``P-i``, producer id, epoch) without ending the transaction. A task that fails
    aborts its own transaction before it raises.
The driver's ``commit`` sends EndTxn COMMIT for every task's transaction (any connection may);
``abort`` sends EndTxn ABORT (a failure there is logged: the next producer of the id, or the
transaction timeout, aborts it).

Crash points (streaming; Spark re-runs the last batch whose offsets are logged and whose commit
is not, with the same offsets, so the same rows reach the same partition ids; the source and
the plan must be deterministic, as for any exactly-once sink):
- a task killed or failed before its message reached the driver: its transaction is open (or
  aborted by itself); the retried attempt's step 1 aborts it. Nothing of it is ever visible.
- the driver killed before ``commit``: every task's transaction is open; at the restart each
  re-run task's step 1 aborts its id's transaction, step 2 finds B not committed, and the batch
  is produced again: once.
- the driver killed during the EndTxn loop: some transactions are committed (rows and the
  offset B visible together), the others open. Re-run: the committed tasks find B in step 2 and
  produce nothing; the others' transactions are aborted in step 1 and they produce again. Once.
- the driver killed after the loop, before Spark's commit log entry: every task finds B: the
  re-run produces nothing.
- a transaction that outlives ``kafka.transaction.timeout.ms`` before the driver commits is
  aborted by the coordinator; the COMMIT then fails (:class:`TransactionCommitError`, naming the
  id and how many were committed) and the query fails; its restart re-runs the batch as above.
For a batch job (no batch id), a job that fails aborts the transactions; a driver killed during
the EndTxn loop leaves what it committed (there is no re-run to finish it), and transactions of
a killed job stay open (readers under read_committed wait) until their timeout.

Requirements and limits of the exactly-once mode: ``P`` must be stable across restarts of one
query and not shared by writes running at the same time (they would fence each other); a
streaming write needs the ``topic`` option (the task records its batch against T-0); speculative
execution must be off (a speculative copy fences the other attempt, and the commit of the
fenced one fails the batch). An attempt whose writer starts after the next attempt of the same
task (Spark retried it before its Python worker began) fences that attempt, which then fails
and is retried: correct, at the cost of an attempt. Transactions are open from each task's
start until the driver's commit: read_committed readers of the topic see nothing past the
oldest open one meanwhile.

Limits: per task one connection per broker and one Produce request in flight; the client's
retries (``kafka.default.api.timeout.ms`` at most) then the error naming broker, topic and
partition fails the task. Picklable: the writers hold frozen options only. Thread safety: each
task builds its own client and producer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Self

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker_embedded.client.wire_fetch_source import WireSource, parse_bootstrap
from broker_embedded.client.wire_produce_sink import ProducerAppender, TxnHandle, WireSink
from broker_embedded.errors import KafkaLogError, UnknownTopicOrPartitionError
from datasource.errors import InvalidOptionError
from datasource.kafka_row_writer import RowPlacer, check_columns
from datasource.kafka_source_options import (
    CLIENT_SETTINGS,
    is_security_option,
    security_properties,
)
from datasource.kafka_write_options import REJECTED, KafkaWriteOptions
from datasource.worker_heap import call_started

log = logging.getLogger(__name__)

BOOTSTRAP = "kafka.bootstrap.servers"
TXN_TIMEOUT = "kafka.transaction.timeout.ms"
DEFAULT_TXN_TIMEOUT_MS = 900_000  # Kafka's default transaction.max.timeout.ms, the most it takes
# the local properties Spark's streaming execution gives the tasks of a micro-batch
BATCH_ID, QUERY_ID = "streaming.sql.batchId", "sql.streaming.queryId"
_WARNED: set[str] = set()


@dataclass(frozen=True)
class WireWriteOptions:
    """``topic``: the topic of every row or None (the column); ``cluster``: where to produce,
    with the client's settings; ``transactional_id_prefix``: exactly once (module docstring),
    or None (at least once); ``transaction_timeout_ms``: the tasks' transactions' timeout."""

    topic: str | None
    cluster: WireSource
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TXN_TIMEOUT_MS


def wire_write_options(options: Mapping[str, str]) -> WireWriteOptions | None:
    """The options of a write over the protocol; ``None`` without ``kafka.bootstrap.servers``
    (a log-dir write)."""
    raw = {str(k).strip().lower(): v for k, v in options.items()}
    bootstrap = raw.get(BOOTSTRAP)
    if bootstrap is None:
        return None
    path = (raw.get("path") or "").strip()
    if path:
        raise InvalidOptionError(
            f"options path={path!r} and {BOOTSTRAP}={bootstrap!r} are both given: pick one, a "
            "log dir to write into (path) or a cluster to produce to over the Kafka protocol "
            f"({BOOTSTRAP})"
        )
    try:
        parse_bootstrap(str(bootstrap))
    except ValueError as e:
        raise InvalidOptionError(
            f"option {BOOTSTRAP}={bootstrap!r} is invalid: {e} (expected host:port,host:port)"
        ) from None
    rest = {k: v for k, v in options.items() if not _is_kafka_or_path(str(k))}
    # topic and unknown options: checked as for a log dir (the path is only a placeholder)
    parsed = KafkaWriteOptions.parse({**rest, "path": str(bootstrap)}, over_protocol=True)
    timeout = raw.pop(TXN_TIMEOUT, None)
    cluster = replace(WireSource(str(bootstrap).strip()), **_client_settings(raw))
    return WireWriteOptions(
        parsed.topic,
        cluster,
        parsed.transactional_id_prefix,
        DEFAULT_TXN_TIMEOUT_MS if timeout is None else _ms(TXN_TIMEOUT, timeout),
    )


def _is_kafka_or_path(key: str) -> bool:
    lower = key.strip().lower()
    return lower.startswith("kafka.") or lower == "path"


def _client_settings(raw: dict[str, str]) -> dict[str, object]:
    """The wire client's settings among the ``kafka.*`` options (module docstring); the
    security ones as the source takes them (kafka_source_options.security_properties)."""
    out: dict[str, object] = {"security": security_properties(raw)}
    for key, value in sorted(raw.items()):
        if key in REJECTED:
            raise InvalidOptionError(REJECTED[key])
        if key == "kafka.acks" and str(value).strip().lower() not in ("all", "-1"):
            raise InvalidOptionError(
                f"option kafka.acks={value!r} is not supported: kafkalog produces with an "
                "idempotent producer, which needs acks=all (as Kafka's producer)"
            )
        if is_security_option(key):
            continue  # security_properties, below
        if key in CLIENT_SETTINGS:
            out[CLIENT_SETTINGS[key]] = value if key == "kafka.client.id" else _ms(key, value)
        elif key.startswith("kafka.") and key not in (BOOTSTRAP, "kafka.acks"):
            if key not in _WARNED:
                _WARNED.add(key)
                log.warning(
                    "option %s=%r has no effect (kafkalog's producer does not use it)", key, value
                )
    return out


def _ms(key: str, value: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 0 < int(text) < 1 << 31:
        raise InvalidOptionError(f"option {key}={value!r} must be a positive integer (ms)")
    return int(text)


def unknown_topic(cluster: WireSource, name: str) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(
        f"topic {name!r} does not exist in {cluster.location}; create it first (e.g. kafkalog "
        f"topics create {name} --bootstrap-server {cluster.bootstrap} --partitions <n>)"
    )


def check_wire_write(options: WireWriteOptions, schema: StructType) -> None:
    """The driver's checks before any task runs: the columns, and the option topic exists."""
    check_columns(schema, options.topic)
    if options.topic is None:
        return
    with WireSink(options.cluster) as sink:
        if sink.topic_limits(options.topic) is None:
            raise unknown_topic(options.cluster, options.topic)


@dataclass(frozen=True)
class WireCommitMessage(WriterCommitMessage):
    """What one task produced: ``(topic, partition, records)`` sorted, its producer id, and
    its open transaction (exactly once; None at least once, or when the task found its
    micro-batch already committed and produced nothing)."""

    produced: tuple[tuple[str, int, int], ...]
    producer_id: int
    txn: TxnHandle | None = None


def produce_task(
    options: WireWriteOptions, iterator: Iterator[pa.RecordBatch]
) -> WireCommitMessage:
    """One task's work: place, encode and produce every Arrow batch of ``iterator`` with one
    idempotent producer, or in a transaction left open for the driver (module docstring);
    raises the first error (at least once, what was produced before it stays)."""
    with WireSink(options.cluster) as sink:
        if options.transactional_id_prefix is not None:
            return _produce_in_transaction(options, sink, iterator)
        producer = sink.producer()
        produced = _produce(options, sink, producer, iterator)
        return WireCommitMessage(produced, producer.producer_id)


def _produce(
    options: WireWriteOptions,
    sink: WireSink,
    producer: ProducerAppender,
    iterator: Iterator[pa.RecordBatch],
) -> tuple[tuple[str, int, int], ...]:
    placer = RowPlacer(
        options.topic, sink.topic_limits, lambda name: unknown_topic(options.cluster, name)
    )
    for batch in iterator:
        placer.append(batch, producer)
    return producer.produced()


@dataclass(frozen=True)
class TaskTransaction:
    """A task's transactional id, and in a streaming query the group recording its committed
    micro-batches (``group_id``, None in a batch write) and this batch's id."""

    transactional_id: str
    group_id: str | None
    batch_id: int

    @classmethod
    def current(cls, prefix: str) -> TaskTransaction:
        from pyspark import TaskContext

        task = TaskContext.get()
        if task is None:
            raise InvalidOptionError(
                f"option transactionalIdPrefix={prefix!r}: the write runs "
                "outside a Spark task (no partition id)"
            )
        tid = f"{prefix}-{task.partitionId()}"
        batch, query = task.getLocalProperty(BATCH_ID), task.getLocalProperty(QUERY_ID)
        if batch is None or query is None:
            return cls(tid, None, -1)
        return cls(tid, f"{tid}-{query}", int(batch))


def _produce_in_transaction(
    options: WireWriteOptions, sink: WireSink, iterator: Iterator[pa.RecordBatch]
) -> WireCommitMessage:
    assert options.transactional_id_prefix is not None
    task = TaskTransaction.current(options.transactional_id_prefix)
    producer = sink.transactional_producer(task.transactional_id, options.transaction_timeout_ms)
    handle = producer.handle
    assert handle is not None
    topic = options.topic
    if task.group_id is not None and topic is not None:
        if sink.committed_offset(task.group_id, topic, 0) >= task.batch_id:
            for _ in iterator:  # read, as Spark expects; the run before a crash committed them
                pass
            log.info(
                "%s: micro-batch %d is already committed, nothing to produce",
                task.transactional_id,
                task.batch_id,
            )
            return WireCommitMessage((), producer.producer_id)
    try:
        produced = _produce(options, sink, producer, iterator)
        if task.group_id is not None and topic is not None:
            producer.commit_offset(task.group_id, topic, 0, task.batch_id)
    except BaseException:
        # the driver never hears of this attempt: abort here (a killed task's transaction is
        # aborted by the next attempt's InitProducerId, or at its timeout)
        abort_transactions(options, [handle], sink)
        raise
    return WireCommitMessage(produced, producer.producer_id, handle)


def _total(messages: Sequence[WireCommitMessage | None]) -> int:
    return sum(n for m in messages if m is not None for _, _, n in m.produced)


def _handles(messages: Sequence[WireCommitMessage | None]) -> list[TxnHandle]:
    return [m.txn for m in messages if m is not None and m.txn is not None]


class TransactionCommitError(KafkaLogError):
    """A task's transaction that the driver could not commit."""


def commit_transactions(options: WireWriteOptions, handles: Sequence[TxnHandle]) -> None:
    """EndTxn COMMIT of every task's transaction, in order; the first failure raises, naming
    the transactional id and how many were committed before it."""
    if not handles:
        return
    cluster = options.cluster
    with WireSink(cluster) as sink:
        for i, handle in enumerate(handles):
            try:
                sink.end_transaction(handle, commit=True)
            except KafkaLogError as e:
                raise TransactionCommitError(
                    f"committing the transaction of {handle.transactional_id!r} (producer id "
                    f"{handle.producer_id}, epoch {handle.producer_epoch}) in "
                    f"{cluster.location} failed after {i} of {len(handles)} were committed: {e}"
                ) from e


def abort_transactions(
    options: WireWriteOptions, handles: Sequence[TxnHandle], sink: WireSink | None = None
) -> None:
    """EndTxn ABORT of every transaction of ``handles`` (through ``sink``, or a sink of its
    own); a failure is logged (the next instance of the transactional id, or its timeout,
    aborts it)."""
    if not handles:
        return
    if sink is None:
        with WireSink(options.cluster) as own:
            abort_transactions(options, handles, own)
        return
    for handle in handles:
        try:
            sink.end_transaction(handle, commit=False)
        except KafkaLogError as e:
            log.warning(
                "aborting the transaction of %r failed (the next instance or its "
                "timeout aborts it): %s",
                handle.transactional_id,
                e,
            )


class _ProducingWriter:
    """What the batch and the streaming writer share: the options, the driver's checks in
    :meth:`create`, and tasks that produce."""

    def __init__(self, options: WireWriteOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: WireWriteOptions, schema: StructType) -> Self:
        check_wire_write(options, schema)
        return cls(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WireCommitMessage:
        call_started()
        return produce_task(self.options, iterator)

    def _fate(self) -> str:
        return "stay there" if self.options.transactional_id_prefix is None else "are aborted"


class WireWriter(_ProducingWriter, DataSourceArrowWriter):
    """``df.write`` over the protocol (module docstring): tasks produce, the driver commits
    their transactions (exactly once) or logs."""

    def commit(self, messages: Sequence[WireCommitMessage | None]) -> None:
        commit_transactions(self.options, _handles(messages))
        log.info("write produced %d records to %s", _total(messages), self.options.cluster.location)

    def abort(self, messages: Sequence[WireCommitMessage | None]) -> None:
        abort_transactions(self.options, _handles(messages))
        log.warning(
            "write failed; the %d records its finished tasks produced to %s %s",
            _total(messages),
            self.options.cluster.location,
            self._fate(),
        )


class WireStreamWriter(_ProducingWriter, DataSourceStreamArrowWriter):
    """``df.writeStream`` over the protocol (module docstring)."""

    @classmethod
    def create(cls, options: WireWriteOptions, schema: StructType) -> Self:
        if options.transactional_id_prefix is not None and options.topic is None:
            raise InvalidOptionError(
                f"option transactionalIdPrefix={options.transactional_id_prefix!r} needs the "
                "option topic in a streaming write (each task records its committed "
                "micro-batches against that topic's partition 0)"
            )
        return super().create(options, schema)

    def commit(self, messages: Sequence[WireCommitMessage | None], batchId: int) -> None:  # noqa: N803
        commit_transactions(self.options, _handles(messages))
        log.info(
            "micro-batch %d produced %d records to %s",
            batchId,
            _total(messages),
            self.options.cluster.location,
        )

    def abort(self, messages: Sequence[WireCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_transactions(self.options, _handles(messages))
        log.warning(
            "micro-batch %d failed; the %d records its finished tasks produced to %s %s",
            batchId,
            _total(messages),
            self.options.cluster.location,
            self._fate(),
        )
