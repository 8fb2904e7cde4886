"""The streaming writer of the ``kafkalog`` data source: ``df.writeStream.format("kafkalog")``
appends each micro-batch of a streaming query to topics of a log dir, exactly once.

With ``kafka.bootstrap.servers`` instead of a path, the micro-batches are produced to a cluster
over the Kafka protocol, AT LEAST ONCE, or exactly once with ``transactionalIdPrefix``
(wire_writer.py :class:`WireStreamWriter`); what follows is the log-dir sink.

Columns, options (``path``, ``topic``), placement, the topic checks and the refusal of a log dir
owned by a running broker are the batch writer's (kafka_writer.py): each micro-batch is a write
job of its own, staged by its tasks beside the log and appended and published atomically by its
commit (the log dir's write port, broker_embedded/storage/log_dir_produce_sink.py). Spark's own
streaming options ``checkpointLocation`` and ``queryName``, which it hands to the sink with the
others, are accepted and not used here. Spark requires a checkpoint location for this sink (the
option, or ``spark.sql.streaming.checkpointLocation``). Output modes: append, and complete as
Spark's Kafka sink takes it (its write builder's ``truncate`` does nothing): each micro-batch's
rows, the whole result table, are appended, the topic is never truncated. Spark itself refuses
update for a Python data source ("kafkalog does not support Update mode": Spark 4.3's
``PythonWriteBuilder`` implements ``SupportsTruncate`` but not
``SupportsStreamingUpdateAsAppend``); ``foreachBatch`` with a ``df.write.format("kafkalog")`` of
each micro-batch writes the rows Spark's Kafka sink writes in update mode.

Exactly once. Spark runs a micro-batch again after a failure (a killed driver, a failed commit):
the batch whose offsets are in the checkpoint's offset log but not in its commit log is planned
again with the same batch id and the same source offsets, by new task attempts. Each commit
therefore records, in the same atomic step as the records, which batch of which query it holds:
``<log dir>/.kafkalog-commits/<query id>.json`` holds the query's last committed batch id, and
the commit of a batch at or below it appends nothing (only the batch id counts; the rows of a
replay are not compared). With a replayable source whose batches Spark replays with the same
offsets (kafkalog, Kafka, files), a query reading and writing kafkalog is exactly-once end to
end, across kills at any point; Spark's Kafka sink is at-least-once.

Which query: the query id, which Spark keeps in the checkpoint (``<checkpoint>/metadata``) and
so keeps across restarts, and which is what numbers the batch ids. A Python data source is not
told it directly: every task reads it from the local property ``sql.streaming.queryId`` that
Spark's stream execution sets for the jobs of a query (the batch id from
``streaming.sql.batchId``), and the commit messages carry both to the driver-side commit (which
gets the batch id from Spark too, and checks them). Consequences:

- a query restarted from its checkpoint keeps its id: its replayed batch is dropped;
- a query whose checkpoint is new (deleted, or under ``spark.sql.streaming.checkpointLocation``
  without a ``queryName``, which gives a new directory at every start) gets a new id and counts
  batches from 0 again: nothing of it is (wrongly) dropped, and nothing guards its restart
  either (as with any sink: no checkpoint, no exactly-once);
- two queries writing into the same log dir have different ids and do not interfere; a query
  started from a copy of another's checkpoint shares its id: do not let both write to one log
  dir.

Empty micro-batches take no lock and record nothing. The commits files are small and stay (one
per query that ever wrote to the log dir).

Processes: :meth:`KafkaLogDataSource.streamWriter` runs for every micro-batch twice: in the
planner's Python worker (the writer its tasks get, with a fresh job id per batch and run) and in
the commit runner's Python worker (a writer whose :meth:`commit` or :meth:`abort` runs; its job
id comes from the commit messages). Picklable: the writer holds the parsed options, a job id and
an optional fixed writer id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.log_dir_produce_sink import LogDirSink, StagedFile
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.kafka_writer import check_write, new_job_id, stage_task
from datasource.worker_heap import call_started

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # MicroBatchExecution.BATCH_ID_KEY
SPARK_STREAM_OPTIONS = frozenset({"checkpointlocation", "queryname"})


class StreamWriteError(KafkaLogError):
    """A micro-batch the streaming writer cannot commit exactly once."""


@dataclass(frozen=True)
class KafkaLogStreamCommitMessage(WriterCommitMessage):
    """What one task of a micro-batch staged, and for which query, batch and write job."""

    files: tuple[StagedFile, ...]
    job_id: str
    writer_id: str
    batch_id: int | None


def _without_spark_options(options: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in options.items() if str(k).strip().lower() not in SPARK_STREAM_OPTIONS}


def _stream_options(options: Mapping[str, str]) -> KafkaWriteOptions:
    """The write options, without Spark's own streaming options."""
    return KafkaWriteOptions.parse(_without_spark_options(options))


class KafkaLogStreamWriter(DataSourceStreamArrowWriter):
    """See the module docstring. Made by :meth:`create`; :meth:`write` runs in each task of a
    micro-batch, :meth:`commit` / :meth:`abort` on the driver side.

    ``writer_id`` fixes the id recorded with each batch instead of the query's id (the tests
    drive the writer without a streaming query); ``None`` reads the query id in each task.
    """

    def __init__(
        self, options: KafkaWriteOptions, job_id: str, writer_id: str | None = None
    ) -> None:
        self.options = options
        self.job_id = job_id
        self.writer_id = writer_id

    @classmethod
    def create(
        cls,
        options: Mapping[str, str],
        schema: StructType,
        overwrite: bool,
        *,
        writer_id: str | None = None,
    ) -> DataSourceStreamArrowWriter:
        """Check the options, columns and log dir (every micro-batch). ``overwrite`` (output mode
        complete) appends as append does, as Spark's Kafka sink does."""
        del overwrite
        from datasource.wire_writer import WireStreamWriter, wire_write_options

        wire = wire_write_options(_without_spark_options(options))  # over the Kafka protocol
        if wire is not None:
            return WireStreamWriter.create(wire, schema)
        parsed = _stream_options(options)
        check_write(parsed, schema)
        return cls(parsed, new_job_id(), writer_id)

    # -- tasks ---------------------------------------------------------------------------------

    def _identity(self) -> tuple[str, int | None]:
        """(writer id, batch id) of the micro-batch this task belongs to."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = None if ctx is None else ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch = None if ctx is None else ctx.getLocalProperty(BATCH_ID_PROPERTY)
        writer_id = self.writer_id or query
        if not writer_id:
            raise StreamWriteError(
                "the kafkalog streaming writer runs outside a streaming query: Spark set no "
                f"query id (local property {QUERY_ID_PROPERTY}) for this task, so its "
                "micro-batch cannot be committed exactly once"
            )
        return writer_id, None if batch is None else int(batch)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogStreamCommitMessage:
        call_started()
        writer_id, batch_id = self._identity()
        # a job per batch (and per run: the planner makes a writer per batch, with a fresh id)
        job_id = self.job_id if batch_id is None else f"{self.job_id}-b{batch_id}"
        files = stage_task(self.options, job_id, iterator)
        return KafkaLogStreamCommitMessage(files, job_id, writer_id, batch_id)

    # -- the driver ----------------------------------------------------------------------------

    def commit(self, messages: Sequence[KafkaLogStreamCommitMessage | None], batchId: int) -> None:
        got = [m for m in messages if m is not None]
        files = [f for m in got for f in m.files]
        jobs = sorted({m.job_id for m in got})
        writers = sorted({m.writer_id for m in got})
        batches = {m.batch_id for m in got} - {None}
        sink = LogDirSink(self.options.path)
        if not files:
            for job in jobs:
                sink.abort(job)
            return
        if len(jobs) != 1 or len(writers) != 1 or batches - {batchId}:
            raise StreamWriteError(
                f"micro-batch {batchId}: its tasks staged for write jobs {jobs} of writers "
                f"{writers} and batches {sorted(batches)}; one job of one query for batch "
                f"{batchId} expected: nothing of the micro-batch was appended to "
                f"{self.options.path}"
            )
        (job,) = jobs
        (writer,) = writers
        done = sink.commit(job, files, writer_id=writer, batch_id=batchId)
        if done:
            log.info(
                "micro-batch %d of query %s appended %s to %s",
                batchId,
                writer,
                done,
                self.options.path,
            )
        else:
            log.info(
                "micro-batch %d of query %s was committed before: replay dropped", batchId, writer
            )

    def abort(self, messages: Sequence[KafkaLogStreamCommitMessage | None], batchId: int) -> None:
        sink = LogDirSink(self.options.path)
        for job in sorted({m.job_id for m in messages if m is not None}):
            sink.abort(job)
