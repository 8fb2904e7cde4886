"""Domain exceptions of the embedded broker.

Every message names what a user needs to find the problem: the file or source, the topic and
partition, the offset and the byte position, as far as they are known where the error is raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


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

    def __init__(self, *args: object) -> None:
        """Without a message, Kafka's default one for the code (:func:`kafka_message`)."""
        super().__init__(*(args or (kafka_message(self.code),)))


class OffsetOutOfRangeError(KafkaApiError):
    """A fetch offset outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE, 1)."""

    code = 1
    name = "OFFSET_OUT_OF_RANGE"


class SegmentTruncatedError(OffsetOutOfRangeError):
    """A segment file shorter than when this process mapped it: another process truncated it
    (recovery of a torn tail, a replica's truncation after an unclean election). Reading its
    mapping past the new end would be a SIGBUS; the reader opens the log dir again (the offsets
    it planned may be gone: an out-of-range fetch)."""


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


class ThrottlingQuotaExceededError(KafkaApiError):
    """A CreateTopics or CreatePartitions (v6+ / v3+) the controller refuses for now: its
    partitions still to be made are at their bound (THROTTLING_QUOTA_EXCEEDED, 89, Kafka's
    answer when a controller mutation quota is exceeded); ``throttle_time_ms``: when to retry."""

    code = 89
    name = "THROTTLING_QUOTA_EXCEEDED"

    def __init__(self, message: str, throttle_time_ms: int = 0) -> None:
        super().__init__(message)
        self.throttle_time_ms = throttle_time_ms


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


# Kafka's default message of each error code, ``Errors.X.message()`` of Apache Kafka 3.9
# (kafka-clients 3.9.1, printed from its ``Errors`` enum): the text Kafka's ``ApiError`` and
# ``Errors.X.exception()`` carry when a broker has nothing more specific to say.
_MESSAGES = {
    -1: "The server experienced an unexpected error when processing the request.",
    1: "The requested offset is not within the range of offsets maintained by the server.",
    2: (
        "This message has failed its CRC checksum, exceeds the valid size, has a null key"
        " for a compacted topic, or is otherwise corrupt."
    ),
    3: "This server does not host this topic-partition.",
    4: "The requested fetch size is invalid.",
    5: (
        "There is no leader for this topic-partition as we are in the middle of a "
        "leadership election."
    ),
    6: (
        "For requests intended only for the leader, this error indicates that the broker "
        "is not the current leader. For requests intended for any replica, this error "
        "indicates that the broker is not a replica of the topic partition."
    ),
    7: "The request timed out.",
    8: "The broker is not available.",
    9: (
        "The replica is not available for the requested topic-partition. Produce/Fetch "
        "requests and other requests intended only for the leader or follower return "
        "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition."
    ),
    10: "The request included a message larger than the max message size the server will accept.",
    11: "The controller moved to another broker.",
    12: "The metadata field of the offset request was too large.",
    13: "The server disconnected before a response was received.",
    14: "The coordinator is loading and hence can't process requests.",
    15: "The coordinator is not available.",
    16: "This is not the correct coordinator.",
    17: "The request attempted to perform an operation on an invalid topic.",
    18: "The request included message batch larger than the configured segment size on the server.",
    19: "Messages are rejected since there are fewer in-sync replicas than required.",
    20: "Messages are written to the log, but to fewer in-sync replicas than required.",
    21: "Produce request specified an invalid value for required acks.",
    22: "Specified group generation id is not valid.",
    23: (
        "The group member's supported protocols are incompatible with those of existing "
        "members or first group member tried to join with empty protocol type or empty "
        "protocol list."
    ),
    24: "The configured groupId is invalid.",
    25: "The coordinator is not aware of this member.",
    26: (
        "The session timeout is not within the range allowed by the broker (as configured"
        " by group.min.session.timeout.ms and group.max.session.timeout.ms)."
    ),
    27: "The group is rebalancing, so a rejoin is needed.",
    28: "The committing offset data size is not valid.",
    29: "Topic authorization failed.",
    30: "Group authorization failed.",
    31: "Cluster authorization failed.",
    32: "The timestamp of the message is out of acceptable range.",
    33: "The broker does not support the requested SASL mechanism.",
    34: "Request is not valid given the current SASL state.",
    35: "The version of API is not supported.",
    36: "Topic with this name already exists.",
    37: "Number of partitions is below 1.",
    38: "Replication factor is below 1 or larger than the number of available brokers.",
    39: "Replica assignment is invalid.",
    40: "Configuration is invalid.",
    41: "This is not the correct controller for this cluster.",
    42: (
        "This most likely occurs because of a request being malformed by the client "
        "library or the message was sent to an incompatible broker. See the broker logs "
        "for more details."
    ),
    43: "The message format version on the broker does not support the request.",
    44: "Request parameters do not satisfy the configured policy.",
    45: "The broker received an out of order sequence number.",
    46: "The broker received a duplicate sequence number.",
    47: "Producer attempted to produce with an old epoch.",
    48: "The producer attempted a transactional operation in an invalid state.",
    49: (
        "The producer attempted to use a producer id which is not currently assigned to "
        "its transactional id."
    ),
    50: (
        "The transaction timeout is larger than the maximum value allowed by the broker "
        "(as configured by transaction.max.timeout.ms)."
    ),
    51: (
        "The producer attempted to update a transaction while another concurrent "
        "operation on the same transaction was ongoing."
    ),
    52: (
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer"
        " the current coordinator for a given producer."
    ),
    53: "Transactional Id authorization failed.",
    54: "Security features are disabled.",
    55: (
        "The broker did not attempt to execute this operation. This may happen for "
        "batched RPCs where some operations in the batch failed, causing the broker to "
        "respond without trying the rest."
    ),
    56: "Disk error when trying to access log file on the disk.",
    57: "The user-specified log directory is not found in the broker config.",
    58: "SASL Authentication failed.",
    59: (
        "This exception is raised by the broker if it could not locate the producer "
        "metadata associated with the producerId in question. This could happen if, for "
        "instance, the producer's records were deleted because their retention time had "
        "elapsed. Once the last records of the producerId are removed, the producer's "
        "metadata is removed from the broker, and future appends by the producer will "
        "return this exception."
    ),
    60: "A partition reassignment is in progress.",
    61: "Delegation Token feature is not enabled.",
    62: "Delegation Token is not found on server.",
    63: "Specified Principal is not valid Owner/Renewer.",
    64: (
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on"
        " delegation token authenticated channels."
    ),
    65: "Delegation Token authorization failed.",
    66: "Delegation Token is expired.",
    67: "Supplied principalType is not supported.",
    68: "The group is not empty.",
    69: "The group id does not exist.",
    70: "The fetch session ID was not found.",
    71: "The fetch session epoch is invalid.",
    72: (
        "There is no listener on the leader broker that matches the listener on which "
        "metadata request was processed."
    ),
    73: "Topic deletion is disabled.",
    74: "The leader epoch in the request is older than the epoch on the broker.",
    75: "The leader epoch in the request is newer than the epoch on the broker.",
    76: "The requesting client does not support the compression type of given partition.",
    77: "Broker epoch has changed.",
    78: (
        "The leader high watermark has not caught up from a recent leader election so the"
        " offsets cannot be guaranteed to be monotonically increasing."
    ),
    79: (
        "The group member needs to have a valid member id before actually entering a "
        "consumer group."
    ),
    80: "The preferred leader was not available.",
    81: "The consumer group has reached its max size.",
    82: (
        "The broker rejected this static consumer since another consumer with the same "
        "group.instance.id has registered with a different member.id."
    ),
    83: "Eligible topic partition leaders are not available.",
    84: "Leader election not needed for topic partition.",
    85: "No partition reassignment is in progress.",
    86: (
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."
    ),
    87: "This record has failed the validation on broker and hence will be rejected.",
    88: "There are unstable offsets that need to be cleared.",
    89: "The throttling quota has been exceeded.",
    90: "There is a newer producer with the same transactionalId which fences the current one.",
    91: "A request illegally referred to a resource that does not exist.",
    92: "A request illegally referred to the same resource twice.",
    93: "Requested credential would not meet criteria for acceptability.",
    94: (
        "Indicates that the either the sender or recipient of a voter-only request is not"
        " one of the expected voters."
    ),
    95: "The given update version was invalid.",
    96: "Unable to update finalized features due to an unexpected server error.",
    97: (
        "Request principal deserialization failed during forwarding. This indicates an "
        "internal error on the broker cluster security setup."
    ),
    98: "Requested snapshot was not found.",
    99: (
        "Requested position is not greater than or equal to zero, and less than the size "
        "of the snapshot."
    ),
    100: "This server does not host this topic ID.",
    101: "This broker ID is already in use.",
    102: "The given broker ID was not registered.",
    103: "The log's topic ID did not match the topic ID in the request.",
    104: "The clusterId in the request does not match that found on the server.",
    105: "The transactionalId could not be found.",
    106: "The fetch session encountered inconsistent topic ID usage.",
    107: "The new ISR contains at least one ineligible replica.",
    108: (
        "The AlterPartition request successfully updated the partition state but the "
        "leader has changed."
    ),
    109: "The requested offset is moved to tiered storage.",
    110: (
        "The member epoch is fenced by the group coordinator. The member must abandon all"
        " its partitions and rejoin."
    ),
    111: (
        "The instance ID is still used by another member in the consumer group. That "
        "member must leave first."
    ),
    112: "The assignor or its version range is not supported by the consumer group.",
    113: (
        "The member epoch is stale. The member must retry after receiving its updated "
        "member epoch via the ConsumerGroupHeartbeat API."
    ),
    114: "The request was sent to an endpoint of the wrong type.",
    115: "This endpoint type is not supported yet.",
    116: "This controller ID is not known.",
    117: "Client sent a push telemetry request with an invalid or outdated subscription ID.",
    118: (
        "Client sent a push telemetry request larger than the maximum size the broker will accept."
    ),
    119: "The controller has considered the broker registration to be invalid.",
    120: (
        "The server encountered an error with the transaction. The client can abort the "
        "transaction to continue using this transactional ID."
    ),
    121: "The record state is invalid. The acknowledgement of delivery could not be completed.",
    122: "The share session was not found.",
    123: "The share session epoch is invalid.",
    124: (
        "The share coordinator rejected the request because the share-group state epoch "
        "did not match."
    ),
    125: "The voter key doesn't match the receiving replica's key.",
    126: "The voter is already part of the set of voters.",
    127: "The voter is not part of the set of voters.",
}
KAFKA_MESSAGES: Mapping[int, str] = MappingProxyType(_MESSAGES)


def kafka_message(code: int) -> str:
    """Kafka's default message for an error code (a code Kafka 3.9 does not have: Kafka's
    wording for an unexpected error, as its clients show an unknown code)."""
    return KAFKA_MESSAGES.get(code, KAFKA_MESSAGES[-1])
