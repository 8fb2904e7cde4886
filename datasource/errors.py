"""Domain exceptions of the ``kafkalog`` data source.

Every message names what a user needs to act: the option and the value given, or the topic,
partition and offsets concerned. Spark wraps an exception raised in a Python data source in its
own (``AnalysisException``, ``PythonException``), keeping this message in its text.
"""

from __future__ import annotations

from broker_embedded.errors import KafkaLogError

DATA_LOSS_HINT = (
    "Some data may have been lost (retention, DeleteRecords, or a log truncated below what was "
    "planned). Set the option failOnDataLoss to false to read what is there instead."
)


class KafkaSourceError(KafkaLogError):
    """Base class of the errors the ``kafkalog`` data source raises on purpose."""


class InvalidOptionError(KafkaSourceError, ValueError):
    """An unknown option, a malformed value, or options that contradict each other."""


class DataLossError(KafkaSourceError):
    """Offsets a query needs are no longer (or not) in the log: retention or DeleteRecords moved
    the log start offset past them, or the high watermark moved back below them. Raised only with
    ``failOnDataLoss=true``; otherwise the reader logs a warning and reads what is there."""


class GroupOffsetsError(KafkaSourceError):
    """A consumer group's committed offsets cannot give where a query starts
    (``startingOffsets=group:<group id>``), or a query cannot commit its progress to a group
    (``commitOffsetsToGroup``): the message names the group, the log dir and what is missing."""


class OffsetsInRemoteStorageError(KafkaSourceError):
    """Offsets a query needs are only in remote storage (tiered storage, KIP-405: local retention
    deleted them from the log dir) and the query reads the log dir without the store
    (option ``remoteLogStorage``): the message names the partition, the offsets and the option
    (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE, to a reader that cannot follow)."""
