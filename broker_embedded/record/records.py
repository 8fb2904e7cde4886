"""Walking a run of batches: a segment file slice or the records of a fetch response.

Every entry, whatever its magic, starts with ``offset int64, size int32`` (12 bytes of log
overhead) and carries its magic byte at position 16. The headers are walked by the one compiled
header walk (``entry_scan.walk_entries``), ``_CHUNK`` entries at a time, so a caller that stops
early has not walked the whole run; this module hands out a :class:`RecordBatch` (magic 2) or a
``LegacyRecordBatch`` (magic 0 and 1) per entry walked and turns the walk's status into the
error, with the message this walk has always given.

The end of the run: a fetch response may end in a partial batch, which a consumer drops
(``tail="stop"``); at the end of a log file a partial batch is a torn write, reported as a
:class:`TornTailError` (``tail="error"``) so recovery can truncate it. A size below the smallest
possible entry, an unknown magic, a negative record count or last offset delta is a
:class:`CorruptRecordError`. Stateless; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import MAGIC_OFFSET
from broker_embedded.record.entry_scan import MIN_ENTRY_BODY
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.record_batch import RecordBatch

__all__ = ["MIN_ENTRY_BODY", "AnyBatch", "iter_batches"]

AnyBatch = RecordBatch | LegacyRecordBatch  # what iter_batches yields

_CHUNK = 64  # entries walked per kernel call
_COLUMNS = slice(es.S_POS, es.S_MAGIC + 1)  # position, size, magic: adjacent columns


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
    arr = readonly_bytes(view)
    table = np.empty((_CHUNK, es.SCAN_FIELDS), np.int64)
    pos = start
    while True:
        n, status, pos, offset, detail = es.walk(arr, pos, stop, False, _CHUNK, False, 0, table)
        for at, size, magic in table[:n, _COLUMNS].tolist():
            entry = view[at : at + size]
            if magic == 2:
                yield RecordBatch(entry, source, base_position + at)
            else:
                yield LegacyRecordBatch(entry, source, base_position + at)
        if status != es.SCAN_FULL:
            break
    if status != es.SCAN_OK:
        known = None if offset < 0 else int(offset)  # a negative base offset names none
        _raise(view, int(status), int(pos), known, int(detail), stop, source, base_position, tail)


def _raise(
    view: memoryview,
    status: int,
    pos: int,
    offset: int | None,
    detail: int,
    stop: int,
    source: str,
    base_position: int,
    tail: str,
) -> None:
    """The error (or, for a partial tail with ``tail="stop"``, the quiet end) of a walk that
    stopped at ``pos`` with ``status``."""
    where = base_position + pos
    if status == es.SCAN_TAIL_SHORT:
        _tail(tail, f"{detail} bytes left, too few for an entry header", source, where)
        return
    if status == es.SCAN_TAIL_TRUNCATED:
        reason = f"batch of {detail} bytes but only {stop - pos} remain"
        _tail(tail, reason, source, where, offset)
        return
    if status == es.SCAN_SHORT_ENTRY:
        magic = view[pos + MAGIC_OFFSET]
        reason = (
            f"entry size {detail} is below the minimum {MIN_ENTRY_BODY[magic]} for magic {magic}"
        )
    else:
        reason = es.SCAN_ERRORS[status].format(detail=detail)
    raise CorruptRecordError(reason, source=source, position=where, base_offset=offset)


def _tail(
    mode: str, reason: str, source: str, position: int, base_offset: int | None = None
) -> None:
    if mode == "error":
        raise TornTailError(
            f"torn tail: {reason}", source=source, position=position, base_offset=base_offset
        )
