"""Walking a run of batches: a segment file slice or the records of a fetch response.

Every entry, whatever its magic, starts with ``offset int64, size int32`` (12 bytes of log
overhead) and carries its magic byte at position 16, so the walker reads those, checks the size,
and hands out a :class:`RecordBatch` (magic 2) or a ``LegacyRecordBatch`` (magic 0 and 1).

The end of the run: a fetch response may end in a partial batch, which a consumer drops
(``tail="stop"``); at the end of a log file a partial batch is a torn write, reported as a
:class:`TornTailError` (``tail="error"``) so recovery can truncate it. A size below the smallest
possible entry or an unknown magic is a :class:`CorruptRecordError`. Stateless; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Literal

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record.batch_layout import LOG_OVERHEAD, MAGIC_OFFSET
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.record_batch import RecordBatch

AnyBatch = RecordBatch | LegacyRecordBatch  # what iter_batches yields

# The smallest body after the 12 bytes of log overhead, per magic (crc, magic, attributes,
# [timestamp], key length, value length; v2: the fixed batch header).
MIN_ENTRY_BODY = {0: 14, 1: 22, 2: 49}
_OVERHEAD = struct.Struct(">qi")


def iter_batches(
    buf: bytes | memoryview,
    source: str = "<buffer>",
    *,
    start: int = 0,
    end: int | None = None,
    base_position: int = 0,
    tail: Literal["stop", "error"] = "stop",
) -> Iterator[AnyBatch]:
    """Yield each batch in ``buf[start:end]``.

    ``base_position`` is added to positions in error messages and batch views (the file position
    of ``buf[0]``).
    """
    view = memoryview(buf)
    stop = len(view) if end is None else end
    pos = start
    while pos < stop:
        remaining = stop - pos
        where = base_position + pos
        if remaining < LOG_OVERHEAD + 5:
            _tail(tail, f"{remaining} bytes left, too few for an entry header", source, where)
            return
        base_offset, length = _OVERHEAD.unpack_from(view, pos)
        magic = view[pos + MAGIC_OFFSET]
        if magic not in MIN_ENTRY_BODY:
            raise CorruptRecordError(
                f"unknown magic {magic}", source=source, position=where, base_offset=base_offset
            )
        if length < MIN_ENTRY_BODY[magic]:
            raise CorruptRecordError(
                f"entry size {length} is below the minimum {MIN_ENTRY_BODY[magic]} "
                f"for magic {magic}",
                source=source,
                position=where,
                base_offset=base_offset,
            )
        size = length + LOG_OVERHEAD
        if size > remaining:
            _tail(
                tail,
                f"batch of {size} bytes but only {remaining} remain",
                source,
                where,
                base_offset,
            )
            return
        entry = view[pos : pos + size]
        if magic == 2:
            yield RecordBatch(entry, source, where)
        else:
            yield LegacyRecordBatch(entry, source, where)
        pos += size


def _tail(
    mode: str, reason: str, source: str, position: int, base_offset: int | None = None
) -> None:
    if mode == "error":
        raise TornTailError(
            f"torn tail: {reason}", source=source, position=position, base_offset=base_offset
        )
