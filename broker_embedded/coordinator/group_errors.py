"""The error codes of the group APIs (Kafka's ``Errors``), as :class:`KafkaApiError` subclasses
carrying Kafka's code and name; the message names the group, member and generation.

Kept beside the group coordinator (not in ``errors.py``) because only it raises them.
Immutable classes: thread-safe.
"""

from __future__ import annotations

from broker_embedded.errors import KafkaApiError


class CoordinatorLoadInProgressError(KafkaApiError):
    """The group's state is being loaded from ``__consumer_offsets``."""

    code, name = 14, "COORDINATOR_LOAD_IN_PROGRESS"


class InconsistentGroupProtocolError(KafkaApiError):
    """A member's protocol type, or every protocol it names, differs from the group's."""

    code, name = 23, "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(KafkaApiError):
    """An empty (or null) group id where one is required."""

    code, name = 24, "INVALID_GROUP_ID"


class UnknownMemberIdError(KafkaApiError):
    """A member id the group does not know."""

    code, name = 25, "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(KafkaApiError):
    """A session timeout outside group.min/max.session.timeout.ms."""

    code, name = 26, "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(KafkaApiError):
    """The group is rebalancing: the member must rejoin."""

    code, name = 27, "REBALANCE_IN_PROGRESS"


class NonEmptyGroupError(KafkaApiError):
    """The group still has members."""

    code, name = 68, "NON_EMPTY_GROUP"


class GroupIdNotFoundError(KafkaApiError):
    """No group has this id."""

    code, name = 69, "GROUP_ID_NOT_FOUND"


class MemberIdRequiredError(KafkaApiError):
    """JoinGroup v4+ of a new member: rejoin with the member id the response carries."""

    code, name = 79, "MEMBER_ID_REQUIRED"


class GroupMaxSizeReachedError(KafkaApiError):
    """The group has group.max.size members."""

    code, name = 81, "GROUP_MAX_SIZE_REACHED"


class FencedInstanceIdError(KafkaApiError):
    """A static member (group.instance.id) replaced by a newer member id."""

    code, name = 82, "FENCED_INSTANCE_ID"


class GroupSubscribedToTopicError(KafkaApiError):
    """OffsetDelete of a topic the group's members are subscribed to."""

    code, name = 86, "GROUP_SUBSCRIBED_TO_TOPIC"


class UnstableOffsetCommitError(KafkaApiError):
    """OffsetFetch with ``require_stable`` of a partition whose transactional offset commit
    awaits its transaction's marker."""

    code, name = 88, "UNSTABLE_OFFSET_COMMIT"
