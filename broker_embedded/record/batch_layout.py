"""Where the fields of a log entry sit: the record batch v2 header and the legacy message set
entry, named once for the Python parsers and the compiled kernels.

Record batch v2 (magic 2) header, big-endian (Kafka's ``DefaultRecordBatch``)::

    0  baseOffset int64            27 baseTimestamp int64 (deleteHorizonMs when attribute bit 6)
    8  batchLength int32           35 maxTimestamp int64
    12 partitionLeaderEpoch int32  43 producerId int64
    16 magic int8 = 2              51 producerEpoch int16
    17 crc uint32 (CRC-32C of      53 baseSequence int32
       [21, end))                  57 recordsCount int32
    21 attributes int16            61 records (the header is 61 bytes)
    23 lastOffsetDelta int32

Legacy message set entry (magic 0 and 1), big-endian::

    0  offset int64 (a magic 1 wrapper: the LAST inner offset)
    8  size int32 (bytes that follow)
    12 crc uint32 (CRC-32 of [16, end))
    16 magic int8
    17 attributes int8
    18 timestamp int64 (magic 1 only)

Every entry starts with ``offset int64, size int32`` (``LOG_OVERHEAD`` = 12 bytes) and has its
magic at byte 16; an entry occupies ``size + LOG_OVERHEAD`` bytes.

The last offset of an entry (:func:`entry_last_offset`): a v2 batch's is baseOffset +
lastOffsetDelta; a legacy entry's is its offset field (its lastOffsetDelta counts as 0, which is
what the header walk, ``entry_scan.walk_entries``, puts in its table for magic 0 and 1).

Plain module-level ints: numba folds them into the kernels as compile-time constants (so they
must never be reassigned: a kernel cached on disk keeps the value it was compiled with).
Immutable module state; thread-safe.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

LOG_OVERHEAD = 12  # offset int64 + size int32, the start of every entry
MAGIC_OFFSET = 16  # every magic

# -- record batch v2 -----------------------------------------------------------------------------
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # also where the CRC-32C starts
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61  # the header: the records section starts here

# attributes int16: bits 0-2 codec, 3 timestamp type (1 = LogAppendTime), 4 transactional,
# 5 control, 6 delete horizon set (baseTimestamp is then deleteHorizonMs)
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# -- legacy message set entry (magic 0 and 1) ------------------------------------------------------
LEGACY_OFFSET_OFFSET = 0
LEGACY_SIZE_OFFSET = 8
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18  # magic 1 only

IntOrArray = TypeVar("IntOrArray", int, np.ndarray)


def entry_last_offset(offset: IntOrArray, last_offset_delta: IntOrArray) -> IntOrArray:
    """The last offset of an entry from its offset field and its lastOffsetDelta (0 for a legacy
    entry). Works on ints and on numpy arrays alike; ``kernel_primitives.last_offset`` is this
    function compiled for the kernels."""
    return offset + last_offset_delta
