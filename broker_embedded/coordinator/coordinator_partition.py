"""Which partition of an internal topic holds a group or a transactional id.

Kafka's rule (``GroupMetadataManager.partitionFor``, ``TransactionStateManager.partitionFor``):
``Utils.abs(id.hashCode()) % numPartitions`` where ``hashCode`` is Java's ``String.hashCode``
(``h = 31 * h + c`` over the UTF-16 code units, in int32 arithmetic: a character outside the BMP
counts as its two surrogates) and ``Utils.abs`` is ``n & 0x7fffffff`` (so ``Integer.MIN_VALUE``
maps to 0, unlike ``Math.abs``). The topics' partition counts are ``offsets.topic.num.partitions``
and ``transaction.state.log.num.partitions``, both 50 by default.

Pure functions; thread-safe.
"""

from __future__ import annotations

GROUP_METADATA_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_NUM_PARTITIONS = 50


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s`` (a signed int32)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The partition of ``__consumer_offsets`` (a group id) or ``__transaction_state`` (a
    transactional id) that holds ``key``, for a topic of ``num_partitions`` partitions."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, not {num_partitions}")
    return (java_string_hash(key) & 0x7FFFFFFF) % num_partitions
