"""Domain exceptions of the embedded broker.

Every message names what a user needs to find the problem: the file or source, the topic and
partition, the offset and the byte position, as far as they are known where the error is raised.

The errors Kafka reports by number (:class:`KafkaApiError` and its subclasses) name their code
as a member of the one table of Kafka's error codes, :mod:`broker_embedded.error_code`, which
gives their Kafka name and default message; one class here introduces each code it has (the
others' are special cases of it), and :func:`api_error` turns any code a broker answers into
that class, or into a :class:`KafkaApiError` carrying the code. Classes: immutable, thread-safe.
"""

from __future__ import annotations

from broker_embedded.error_code import ErrorCode, kafka_message


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
    """An error Kafka reports to clients by number: ``code`` is a member of Kafka's error table
    (:class:`~broker_embedded.error_code.ErrorCode`), ``name`` Kafka's name of it.

    Subclasses set ``code`` as a class attribute (an instance may narrow it, e.g. a client
    answer's code); the message names the topic partition, producer id, epoch, sequence and
    offset as far as they are known. :func:`api_error` maps any code to its class here.
    """

    code: int = ErrorCode.unknown_server_error

    def __init__(self, *args: object) -> None:
        """Without a message, Kafka's default one for the code (:func:`kafka_message`)."""
        super().__init__(*(args or (kafka_message(self.code),)))

    @property
    def name(self) -> str:
        """Kafka's name of the code (``INVALID_REQUEST``); UNKNOWN_SERVER_ERROR for a code
        Kafka's table lacks."""
        try:
            return ErrorCode(self.code).kafka_name
        except ValueError:
            return ErrorCode.unknown_server_error.kafka_name


class OffsetOutOfRangeError(KafkaApiError):
    """A fetch offset outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE, 1)."""

    code = ErrorCode.offset_out_of_range


class OffsetMovedToTieredStorageError(KafkaApiError):
    """A fetch offset at or above the log start offset but below the local log start offset
    of a tiered partition (OFFSET_MOVED_TO_TIERED_STORAGE, 109): its batches are only in the
    object store. A follower gets this code; a consumer's fetch is served from the store."""

    code = ErrorCode.offset_moved_to_tiered_storage


class RemoteStorageError(KafkaApiError):
    """Remote storage failed a read (the store unreachable after its retries, an object
    missing or corrupt): UNKNOWN_SERVER_ERROR, as Kafka answers its ``RemoteStorageException``;
    the message and the broker's log name the key."""


class SegmentTruncatedError(OffsetOutOfRangeError):
    """A segment file shorter than when this process mapped it: another process truncated it
    (recovery of a torn tail, a replica's truncation after an unclean election). Reading its
    mapping past the new end would be a SIGBUS; the reader opens the log dir again (the offsets
    it planned may be gone: an out-of-range fetch)."""


class CorruptMessageError(KafkaApiError):
    """A produced batch whose CRC or framing is wrong (CORRUPT_MESSAGE, 2)."""

    code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaApiError):
    """A topic this broker does not know, or a partition beyond its count (3)."""

    code = ErrorCode.unknown_topic_or_partition


class NotLeaderOrFollowerError(KafkaApiError):
    """A request for a partition this broker does not lead (or follow, for followers) (6)."""

    code = ErrorCode.not_leader_or_follower


class RequestTimedOutError(KafkaApiError):
    """A produce with acks=all whose records were not replicated within its timeout (7)."""

    code = ErrorCode.request_timed_out


class ThrottlingQuotaExceededError(KafkaApiError):
    """A CreateTopics or CreatePartitions (v6+ / v3+) the controller refuses for now: its
    partitions still to be made are at their bound (THROTTLING_QUOTA_EXCEEDED, 89, Kafka's
    answer when a controller mutation quota is exceeded); ``throttle_time_ms``: when to retry."""

    code = ErrorCode.throttling_quota_exceeded

    def __init__(self, message: str, throttle_time_ms: int = 0) -> None:
        super().__init__(message)
        self.throttle_time_ms = throttle_time_ms


class RecordTooLargeError(KafkaApiError):
    """A batch larger than the topic's ``max.message.bytes`` (RECORD_TOO_LARGE, 10)."""

    code = ErrorCode.message_too_large


class StaleControllerEpochError(KafkaApiError):
    """A controller request carrying an epoch older than one already seen (11)."""

    code = ErrorCode.stale_controller_epoch


class InvalidTopicError(KafkaApiError):
    """A topic name that breaks Kafka's rules (INVALID_TOPIC_EXCEPTION, 17)."""

    code = ErrorCode.invalid_topic_exception


class NotEnoughReplicasError(KafkaApiError):
    """acks=all while the ISR is smaller than ``min.insync.replicas`` (19)."""

    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaApiError):
    """acks=all records appended, then the ISR shrank below ``min.insync.replicas`` (20)."""

    code = ErrorCode.not_enough_replicas_after_append


class InvalidRequiredAcksError(KafkaApiError):
    """acks other than 0, 1 or -1 (all) (21)."""

    code = ErrorCode.invalid_required_acks


class TopicAlreadyExistsError(KafkaApiError):
    """Creating a topic that exists (36)."""

    code = ErrorCode.topic_already_exists


class InvalidRequestError(KafkaApiError):
    """A request whose arguments contradict each other or Kafka's rules (42)."""

    code = ErrorCode.invalid_request


class KafkaStorageError(KafkaApiError):
    """The log of a partition cannot be used (closed broker, failed disk) (56)."""

    code = ErrorCode.kafka_storage_error


class LogDirFailureError(KafkaStorageError):
    """A write failed and could not be undone (a segment cut back after a failed append, an
    fsync): the log holds bytes it cannot vouch for, so it stops taking writes until the broker
    restarts and recovers it, as Kafka takes a failed log dir offline
    (KAFKA_STORAGE_ERROR, 56)."""


class FetchSessionIdNotFoundError(KafkaApiError):
    """An incremental fetch naming a session this broker does not hold (never created, closed or
    evicted): the client falls back to a full fetch (FETCH_SESSION_ID_NOT_FOUND, 70)."""

    code = ErrorCode.fetch_session_id_not_found


class InvalidFetchSessionEpochError(KafkaApiError):
    """An incremental fetch whose session epoch is not the one the session expects (71)."""

    code = ErrorCode.invalid_fetch_session_epoch


class FencedLeaderEpochError(KafkaApiError):
    """A request whose current leader epoch is older than the partition's (74)."""

    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaApiError):
    """A request whose current leader epoch is newer than the partition's (75)."""

    code = ErrorCode.unknown_leader_epoch


class InvalidRecordError(KafkaApiError):
    """A batch Kafka's validation rejects: record count vs last offset delta, a client control
    batch, a keyless record on a compacted topic, a missing sequence (INVALID_RECORD, 87)."""

    code = ErrorCode.invalid_record


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

    code = ErrorCode.invalid_update_version


class FetchSessionTopicIdError(KafkaApiError):
    """An incremental fetch whose request version disagrees with its session on topic ids
    (a session created with topic ids, v13+, continued by an older request, or the reverse)
    (FETCH_SESSION_TOPIC_ID_ERROR, 106)."""

    code = ErrorCode.fetch_session_topic_id_error


class IneligibleReplicaError(KafkaApiError):
    """An ISR change adding a broker that is stopped (107)."""

    code = ErrorCode.ineligible_replica


class InvalidPartitionsError(KafkaApiError):
    """A partition count that is not positive, or that does not grow a topic (37)."""

    code = ErrorCode.invalid_partitions


class PolicyViolationError(KafkaApiError):
    """A request the broker's policy refuses, such as more than 10,000 new partitions in one
    request (44)."""

    code = ErrorCode.policy_violation


class InvalidReplicationFactorError(KafkaApiError):
    """A replication factor that is not positive or exceeds the available brokers (38)."""

    code = ErrorCode.invalid_replication_factor


class OutOfOrderSequenceError(KafkaApiError):
    """An idempotent batch whose first sequence does not follow the producer's last one (45)."""

    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaApiError):
    """A batch or marker whose producer epoch is older than the partition's for that producer
    (47; Kafka 2.7+ answers a stale epoch on produce with this instead of PRODUCER_FENCED)."""

    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaApiError):
    """A non-transactional batch from a producer with an ongoing transaction (48)."""

    code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(KafkaApiError):
    """A transactional request whose producer id is not the one its transactional id holds
    (49)."""

    code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(KafkaApiError):
    """A transaction timeout outside (0, transaction.max.timeout.ms] (50)."""

    code = ErrorCode.invalid_transaction_timeout


class ConcurrentTransactionsError(KafkaApiError):
    """The transactional id is completing a transaction (its markers are being written):
    retriable (51)."""

    code = ErrorCode.concurrent_transactions


class TransactionalIdAuthorizationFailedError(KafkaApiError):
    """A transactional request this broker refuses for its transactional id (53), e.g. a
    two-phase commit (KIP-939) that is not enabled."""

    code = ErrorCode.transactional_id_authorization_failed


class OperationNotAttemptedError(KafkaApiError):
    """A partition of a request not attempted because another of it failed (55)."""

    code = ErrorCode.operation_not_attempted


class TransactionCoordinatorFencedError(KafkaApiError):
    """A transaction marker from a coordinator epoch older than the last one seen (52)."""

    code = ErrorCode.transaction_coordinator_fenced


class ProducerFencedError(KafkaApiError):
    """A producer fenced by a newer instance with the same transactional id (90)."""

    code = ErrorCode.producer_fenced


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

    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(KafkaApiError):
    """A coordinator request sent to a broker that is not that key's coordinator (16)."""

    code = ErrorCode.not_coordinator


class CoordinatorLoadInProgressError(KafkaApiError):
    """A coordinator still loading the partition of its internal topic that holds the key
    (COORDINATOR_LOAD_IN_PROGRESS, 14)."""

    code = ErrorCode.coordinator_load_in_progress


class TransactionalIdNotFoundError(KafkaApiError):
    """DescribeTransactions of a transactional id the coordinator does not know
    (TRANSACTIONAL_ID_NOT_FOUND, 105)."""

    code = ErrorCode.transactional_id_not_found


class UnsupportedCompressionTypeError(KafkaApiError):
    """A produced batch whose codec the request's version may not use: zstd before Produce v7
    (UNSUPPORTED_COMPRESSION_TYPE, 76)."""

    code = ErrorCode.unsupported_compression_type


class UnknownTopicIdError(KafkaApiError):
    """A request naming a topic by an id no topic has (UNKNOWN_TOPIC_ID, 100)."""

    code = ErrorCode.unknown_topic_id


class InvalidReplicaAssignmentError(KafkaApiError):
    """A replica assignment the controller will not use, e.g. a manual one in CreateTopics
    (INVALID_REPLICA_ASSIGNMENT, 39)."""

    code = ErrorCode.invalid_replica_assignment


class OffsetMetadataTooLargeError(KafkaApiError):
    """An offset commit whose metadata exceeds ``offset.metadata.max.bytes`` (12)."""

    code = ErrorCode.offset_metadata_too_large


class IllegalGenerationError(KafkaApiError):
    """An offset commit from a group generation the coordinator does not know (22)."""

    code = ErrorCode.illegal_generation


class TopicAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the topic (TOPIC_AUTHORIZATION_FAILED, 29)."""

    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the group (GROUP_AUTHORIZATION_FAILED, 30)."""

    code = ErrorCode.group_authorization_failed


class ClusterAuthorizationFailedError(KafkaApiError):
    """The principal may not do this to the cluster (CLUSTER_AUTHORIZATION_FAILED, 31)."""

    code = ErrorCode.cluster_authorization_failed


class LeaderNotAvailableError(KafkaApiError):
    """A partition without a leader, in the middle of an election (LEADER_NOT_AVAILABLE, 5)."""

    code = ErrorCode.leader_not_available


class SaslAuthenticationError(KafkaApiError):
    """Credentials refused (SASL_AUTHENTICATION_FAILED, 58; a client answered that the
    mechanism is not enabled narrows ``code`` to UNSUPPORTED_SASL_MECHANISM, 33); the message
    names the mechanism or the broker and says why."""

    code = ErrorCode.sasl_authentication_failed


class InvalidCommitOffsetSizeError(KafkaApiError):
    """An offset commit whose records exceed the topic's ``max.message.bytes`` (28)."""

    code = ErrorCode.invalid_commit_offset_size


# The group APIs' errors (the group coordinator raises them); the message names the group,
# member and generation.


class InconsistentGroupProtocolError(KafkaApiError):
    """A member's protocol type, or every protocol it names, differs from the group's."""

    code = ErrorCode.inconsistent_group_protocol


class InvalidGroupIdError(KafkaApiError):
    """An empty (or null) group id where one is required."""

    code = ErrorCode.invalid_group_id


class UnknownMemberIdError(KafkaApiError):
    """A member id the group does not know."""

    code = ErrorCode.unknown_member_id


class InvalidSessionTimeoutError(KafkaApiError):
    """A session timeout outside group.min/max.session.timeout.ms."""

    code = ErrorCode.invalid_session_timeout


class RebalanceInProgressError(KafkaApiError):
    """The group is rebalancing: the member must rejoin."""

    code = ErrorCode.rebalance_in_progress


class NonEmptyGroupError(KafkaApiError):
    """The group still has members."""

    code = ErrorCode.non_empty_group


class GroupIdNotFoundError(KafkaApiError):
    """No group has this id."""

    code = ErrorCode.group_id_not_found


class MemberIdRequiredError(KafkaApiError):
    """JoinGroup v4+ of a new member: rejoin with the member id the response carries."""

    code = ErrorCode.member_id_required


class GroupMaxSizeReachedError(KafkaApiError):
    """The group has group.max.size members."""

    code = ErrorCode.group_max_size_reached


class FencedInstanceIdError(KafkaApiError):
    """A static member (group.instance.id) replaced by a newer member id."""

    code = ErrorCode.fenced_instance_id


class GroupSubscribedToTopicError(KafkaApiError):
    """OffsetDelete of a topic the group's members are subscribed to."""

    code = ErrorCode.group_subscribed_to_topic


class UnstableOffsetCommitError(KafkaApiError):
    """OffsetFetch with ``require_stable`` of a partition whose transactional offset commit
    awaits its transaction's marker."""

    code = ErrorCode.unstable_offset_commit


def api_error(code: int, message: str) -> KafkaApiError:
    """The domain exception of Kafka error ``code`` answered to a request: the class of
    :data:`API_ERRORS` for it, else a :class:`KafkaApiError` carrying the code. The message is
    ``message`` with Kafka's name of the code (the number, for a code Kafka's table lacks)."""
    if code in API_ERRORS:
        return API_ERRORS[code](f"{message}: {ErrorCode(code).kafka_name}")
    try:
        error = KafkaApiError(f"{message}: {ErrorCode(code).kafka_name}")
    except ValueError:
        error = KafkaApiError(f"{message} (error code {code})")
    error.code = code
    return error


def _api_errors() -> dict[int, type[KafkaApiError]]:
    """Each code's class in this module: the one that introduces the code (a subclass keeping
    its parent's code, such as SegmentTruncatedError, is a special case of it)."""
    found: dict[int, type[KafkaApiError]] = {}
    pending = [KafkaApiError]
    while pending:
        cls = pending.pop(0)
        for sub in cls.__subclasses__():
            pending.append(sub)
            if sub.__module__ == __name__ and sub.code != cls.code:
                found.setdefault(sub.code, sub)
    return found


# Kafka error code -> the exception class of this module raised for it (codes without one get a
# plain KafkaApiError from api_error)
API_ERRORS: dict[int, type[KafkaApiError]] = _api_errors()
