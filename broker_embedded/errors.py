"""Domain exceptions of the embedded broker.

Every message names what a user needs to find the problem: the file or source, the topic and
partition, the offset and the byte position, as far as they are known where the error is raised.
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Base class of every error this project raises on purpose."""


class CorruptRecordError(KafkaLogError):
    """Bytes that are not a valid record batch or legacy message set.

    ``source`` names the file or buffer, ``position`` the byte position (within ``source``) of the
    batch that is bad, ``base_offset`` that batch's base offset when it could be read.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "<buffer>",
        position: int | None = None,
        base_offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.position = position
        self.base_offset = base_offset
        where = [f"in {source}"]
        if position is not None:
            where.append(f"at byte {position}")
        if base_offset is not None:
            where.append(f"(batch base offset {base_offset})")
        super().__init__(f"corrupt record data {' '.join(where)}: {reason}")


class TornTailError(CorruptRecordError):
    """A batch cut short at the very end of a log: recovery truncates it."""


class CheckpointError(KafkaLogError):
    """A checkpoint file (replication-offset-checkpoint, ...) that cannot be parsed."""


class IndexCorruptError(KafkaLogError):
    """An offset or time index whose entries contradict its log segment."""


class InvalidOffsetError(KafkaLogError):
    """An append whose offsets do not lie above what a log segment or an index already holds."""


class SegmentOffsetOverflowError(KafkaLogError):
    """An offset that cannot be stored relative to its segment's base offset (int32 overflow)."""


class IndexFullError(KafkaLogError):
    """An append to an offset or time index that already holds its maximum number of entries."""


class InconsistentTopicIdError(KafkaLogError):
    """A partition directory whose ``partition.metadata`` names another topic id."""


class KafkaApiError(KafkaLogError):
    """An error Kafka reports to clients by number: ``code`` and ``name`` are Kafka's (Errors.java).

    Subclasses set both as class attributes; the message names the topic partition, producer id,
    epoch, sequence and offset as far as they are known.
    """

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(KafkaApiError):
    """A fetch offset outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE, 1)."""

    code = 1
    name = "OFFSET_OUT_OF_RANGE"


class CorruptMessageError(KafkaApiError):
    """A produced batch whose CRC or framing is wrong (CORRUPT_MESSAGE, 2)."""

    code = 2
    name = "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(KafkaApiError):
    """A topic this broker does not know, or a partition beyond its count (3)."""

    code = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"


class NotLeaderOrFollowerError(KafkaApiError):
    """A request for a partition this broker does not lead (or follow, for followers) (6)."""

    code = 6
    name = "NOT_LEADER_OR_FOLLOWER"


class RequestTimedOutError(KafkaApiError):
    """A produce with acks=all whose records were not replicated within its timeout (7)."""

    code = 7
    name = "REQUEST_TIMED_OUT"


class RecordTooLargeError(KafkaApiError):
    """A batch larger than the topic's ``max.message.bytes`` (RECORD_TOO_LARGE, 10)."""

    code = 10
    name = "MESSAGE_TOO_LARGE"


class StaleControllerEpochError(KafkaApiError):
    """A controller request carrying an epoch older than one already seen (11)."""

    code = 11
    name = "STALE_CONTROLLER_EPOCH"


class InvalidTopicError(KafkaApiError):
    """A topic name that breaks Kafka's rules (INVALID_TOPIC_EXCEPTION, 17)."""

    code = 17
    name = "INVALID_TOPIC_EXCEPTION"


class NotEnoughReplicasError(KafkaApiError):
    """acks=all while the ISR is smaller than ``min.insync.replicas`` (19)."""

    code = 19
    name = "NOT_ENOUGH_REPLICAS"


class NotEnoughReplicasAfterAppendError(KafkaApiError):
    """acks=all records appended, then the ISR shrank below ``min.insync.replicas`` (20)."""

    code = 20
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


class InvalidRequiredAcksError(KafkaApiError):
    """acks other than 0, 1 or -1 (all) (21)."""

    code = 21
    name = "INVALID_REQUIRED_ACKS"


class TopicAlreadyExistsError(KafkaApiError):
    """Creating a topic that exists (36)."""

    code = 36
    name = "TOPIC_ALREADY_EXISTS"


class InvalidRequestError(KafkaApiError):
    """A request whose arguments contradict each other or Kafka's rules (42)."""

    code = 42
    name = "INVALID_REQUEST"


class KafkaStorageError(KafkaApiError):
    """The log of a partition cannot be used (closed broker, failed disk) (56)."""

    code = 56
    name = "KAFKA_STORAGE_ERROR"


class LogDirFailureError(KafkaStorageError):
    """A write failed and could not be undone (a segment cut back after a failed append, an
    fsync): the log holds bytes it cannot vouch for, so it stops taking writes until the broker
    restarts and recovers it, as Kafka takes a failed log dir offline
    (KAFKA_STORAGE_ERROR, 56)."""


class FetchSessionIdNotFoundError(KafkaApiError):
    """An incremental fetch naming a session this broker does not hold (never created, closed or
    evicted): the client falls back to a full fetch (FETCH_SESSION_ID_NOT_FOUND, 70)."""

    code = 70
    name = "FETCH_SESSION_ID_NOT_FOUND"


class InvalidFetchSessionEpochError(KafkaApiError):
    """An incremental fetch whose session epoch is not the one the session expects (71)."""

    code = 71
    name = "INVALID_FETCH_SESSION_EPOCH"


class FencedLeaderEpochError(KafkaApiError):
    """A request whose current leader epoch is older than the partition's (74)."""

    code = 74
    name = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(KafkaApiError):
    """A request whose current leader epoch is newer than the partition's (75)."""

    code = 75
    name = "UNKNOWN_LEADER_EPOCH"


class InvalidRecordError(KafkaApiError):
    """A batch Kafka's validation rejects: record count vs last offset delta, a client control
    batch, a keyless record on a compacted topic, a missing sequence (INVALID_RECORD, 87)."""

    code = 87
    name = "INVALID_RECORD"


class RecordValidationError(InvalidRecordError):
    """Records of a batch that Kafka's ``LogValidator`` rejects one by one (its
    ``RecordValidationException``; today: keyless records on a compacted topic).

    ``record_errors``: (index of the record in its batch, Kafka's message for it), at most
    :data:`MAX_RECORD_ERRORS` of them, the first ones; ``total`` counts them all. The
    exception's message is ``reason`` (naming topic, partition and batch); :attr:`summary` is
    Kafka's text for the Produce response, naming the total and the first three.
    """

    def __init__(self, reason: str, record_errors: list[tuple[int, str]], total: int) -> None:
        self.record_errors = tuple(record_errors[:MAX_RECORD_ERRORS])
        self.total = total
        super().__init__(f"{reason} ({total} records, the first at index {record_errors[0][0]})")

    @property
    def summary(self) -> str:
        shown = ", ".join(
            f"RecordError(batchIndex={i}, message='{m}')" for i, m in self.record_errors[:3]
        )
        return (
            f"One or more records have been rejected due to {self.total} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]"
        )


# the record errors a RecordValidationError keeps (and a Produce response lists); Kafka lists
# every one, which for a batch of tiny records is ten times the batch's size
MAX_RECORD_ERRORS = 1000


class InvalidUpdateVersionError(KafkaApiError):
    """An ISR change proposed against a partition epoch the controller has moved past (95)."""

    code = 95
    name = "INVALID_UPDATE_VERSION"


class FetchSessionTopicIdError(KafkaApiError):
    """An incremental fetch whose request version disagrees with its session on topic ids
    (a session created with topic ids, v13+, continued by an older request, or the reverse)
    (FETCH_SESSION_TOPIC_ID_ERROR, 106)."""

    code = 106
    name = "FETCH_SESSION_TOPIC_ID_ERROR"


class IneligibleReplicaError(KafkaApiError):
    """An ISR change adding a broker that is stopped (107)."""

    code = 107
    name = "INELIGIBLE_REPLICA"


class InvalidPartitionsError(KafkaApiError):
    """A partition count that is not positive, or that does not grow a topic (37)."""

    code = 37
    name = "INVALID_PARTITIONS"


class PolicyViolationError(KafkaApiError):
    """A request the broker's policy refuses, such as more than 10,000 new partitions in one
    request (44)."""

    code = 44
    name = "POLICY_VIOLATION"


class InvalidReplicationFactorError(KafkaApiError):
    """A replication factor that is not positive or exceeds the available brokers (38)."""

    code = 38
    name = "INVALID_REPLICATION_FACTOR"


class OutOfOrderSequenceError(KafkaApiError):
    """An idempotent batch whose first sequence does not follow the producer's last one (45)."""

    code = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(KafkaApiError):
    """A batch or marker whose producer epoch is older than the partition's for that producer
    (47; Kafka 2.7+ answers a stale epoch on produce with this instead of PRODUCER_FENCED)."""

    code = 47
    name = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(KafkaApiError):
    """A non-transactional batch from a producer with an ongoing transaction (48)."""

    code = 48
    name = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(KafkaApiError):
    """A transactional request whose producer id is not the one its transactional id holds
    (49)."""

    code = 49
    name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(KafkaApiError):
    """A transaction timeout outside (0, transaction.max.timeout.ms] (50)."""

    code = 50
    name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(KafkaApiError):
    """The transactional id is completing a transaction (its markers are being written):
    retriable (51)."""

    code = 51
    name = "CONCURRENT_TRANSACTIONS"


class TransactionalIdAuthorizationFailedError(KafkaApiError):
    """A transactional request this broker refuses for its transactional id (53), e.g. a
    two-phase commit (KIP-939) that is not enabled."""

    code = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class OperationNotAttemptedError(KafkaApiError):
    """A partition of a request not attempted because another of it failed (55)."""

    code = 55
    name = "OPERATION_NOT_ATTEMPTED"


class TransactionCoordinatorFencedError(KafkaApiError):
    """A transaction marker from a coordinator epoch older than the last one seen (52)."""

    code = 52
    name = "TRANSACTION_COORDINATOR_FENCED"


class ProducerFencedError(KafkaApiError):
    """A producer fenced by a newer instance with the same transactional id (90)."""

    code = 90
    name = "PRODUCER_FENCED"


class BrokerClosedError(KafkaLogError):
    """A request to a broker (or log) that has been closed or stopped."""


class LogDirLockedError(KafkaLogError):
    """A log dir whose ``.lock`` another process (or another broker in this one) holds."""


class AdminOperationError(KafkaLogError):
    """An administrative request Kafka refuses outright (Kafka's ``AdminOperationException``),
    e.g. rack-aware replica placement when only some brokers have a rack."""


class CorruptSnapshotError(KafkaLogError):
    """A producer state snapshot (``<offset>.snapshot``) that cannot be read."""


class ProducerStateError(KafkaLogError):
    """A producer state update used against a state that changed since it was prepared."""


class TooManyOpenFilesError(KafkaStorageError):
    """A file that cannot be opened because an open-files limit is reached (``EMFILE``: the
    process's ``ulimit -n``; ``ENFILE``: the system's); the message names the file and the
    limit with its value."""


class CoordinatorNotAvailableError(KafkaApiError):
    """A coordinator this broker does not run (COORDINATOR_NOT_AVAILABLE, 15)."""

    code = 15
    name = "COORDINATOR_NOT_AVAILABLE"


class NotCoordinatorError(KafkaApiError):
    """A coordinator request sent to a broker that is not that key's coordinator (16)."""

    code = 16
    name = "NOT_COORDINATOR"


class CoordinatorLoadInProgressError(KafkaApiError):
    """A coordinator still loading the partition of its internal topic that holds the key
    (COORDINATOR_LOAD_IN_PROGRESS, 14)."""

    code = 14
    name = "COORDINATOR_LOAD_IN_PROGRESS"


class TransactionalIdNotFoundError(KafkaApiError):
    """DescribeTransactions of a transactional id the coordinator does not know
    (TRANSACTIONAL_ID_NOT_FOUND, 105)."""

    code = 105
    name = "TRANSACTIONAL_ID_NOT_FOUND"


class UnsupportedCompressionTypeError(KafkaApiError):
    """A produced batch whose codec the request's version may not use: zstd before Produce v7
    (UNSUPPORTED_COMPRESSION_TYPE, 76)."""

    code = 76
    name = "UNSUPPORTED_COMPRESSION_TYPE"


class UnknownTopicIdError(KafkaApiError):
    """A request naming a topic by an id no topic has (UNKNOWN_TOPIC_ID, 100)."""

    code = 100
    name = "UNKNOWN_TOPIC_ID"


class InvalidReplicaAssignmentError(KafkaApiError):
    """A replica assignment the controller will not use, e.g. a manual one in CreateTopics
    (INVALID_REPLICA_ASSIGNMENT, 39)."""

    code = 39
    name = "INVALID_REPLICA_ASSIGNMENT"


class OffsetMetadataTooLargeError(KafkaApiError):
    """An offset commit whose metadata exceeds ``offset.metadata.max.bytes`` (12)."""

    code = 12
    name = "OFFSET_METADATA_TOO_LARGE"


class IllegalGenerationError(KafkaApiError):
    """An offset commit from a group generation the coordinator does not know (22)."""

    code = 22
    name = "ILLEGAL_GENERATION"


class TopicAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the topic (TOPIC_AUTHORIZATION_FAILED, 29)."""

    code = 29
    name = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the group (GROUP_AUTHORIZATION_FAILED, 30)."""

    code = 30
    name = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the cluster (CLUSTER_AUTHORIZATION_FAILED, 31)."""

    code = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"
