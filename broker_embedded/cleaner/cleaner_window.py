"""How the cleaner reads a segment (:class:`WindowReader`, a base class of
:class:`~broker_embedded.cleaner.cleaner.Cleaner`): whole batches a window at a time
(:class:`Window`), with ``pread`` into the cleaner's buffer (grown to hold the largest batch),
never mapped; per window ``entry_scan.scan_window`` reads the batch headers into a table and
every v2 batch's CRC-32C is checked (a mismatch is a :class:`CorruptRecordError` naming the
file, position and offset: a rewritten batch gets a new CRC, which would hide the damage).
Then the window's plan for the cleaner kernel (cleaner_kernel.py): one row per batch, compressed
records sections decompressed into the side buffer, legacy entries copied verbatim.

Thread safety: the cleaner's thread only; these methods work on the cleaner's buffers, so this
class is never used alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from broker_embedded.cleaner import cleaner_kernel as ck
from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import decode_kernel as dk
from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import (
    RECORD_BATCH_OVERHEAD,
)
from broker_embedded.record.compression import CompressionType, decompress
from broker_embedded.record.crc_check import crc_mismatch
from broker_embedded.record.entry_scan import scan_window
from broker_embedded.record.record_batch import (
    CODEC_MASK,
)
from broker_embedded.storage.cleaning_session import (
    CleaningAbortedError,
)

_DECODE_ERRORS = {
    dk.E_BAD_SECTION: "records section outside the batch",
    dk.E_VARINT: "bad varint",
    dk.E_RECORD_LENGTH: "record length {a} runs past the batch",
    dk.E_TRUNCATED: "a field runs past the record end",
    dk.E_STRAY_BYTES: "{a} stray bytes after the record's fields",
    dk.E_OFFSET_DELTA: "record offset delta {a} outside [0, {b}]",
    dk.E_TOO_FEW: "batch declares {a} records but holds {b}",
    dk.E_LEFT_OVER: "{b} bytes left over after the batch's {a} records",
    dk.E_HEADER_COUNT: "impossible header count {a}",
    dk.E_NULL_HEADER_KEY: "null header key",
    dk.E_NEGATIVE_LENGTH: "negative length {a}",
}


class Window:
    """A run of whole batches of one segment, read into the cleaner's buffer."""

    __slots__ = ("data", "table", "position", "is_last")

    def __init__(self, data: np.ndarray, table: np.ndarray, position: int, is_last: bool) -> None:
        self.data = data  # the window's bytes (a view of the read buffer)
        self.table = table  # decode_kernel scan rows, positions relative to ``data``
        self.position = position  # the file position of data[0]
        self.is_last = is_last  # the window ends at the end of the file


class WindowReader:
    """The segment reading of a cleaner (module docstring)."""

    def _windows(self, path: Path, start: int, size: int) -> Iterator[Window]:
        """Whole batches of ``path[start:size]``, a window at a time (``size``: the file size
        the round saw; a closed segment does not change)."""
        source = str(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = start
            while pos < size:
                want = min(size - pos, max(self.window_bytes, 0))
                if len(self._read) < want:
                    self._read = np.empty(want, np.uint8)
                got = 0
                while got < want:
                    n = os.preadv(fd, [memoryview(self._read)[got:want]], pos + got)
                    if n <= 0:
                        raise CleaningAbortedError(f"{source} shrank while it was being cleaned")
                    got += n
                data = self._read[:want].view()
                data.flags.writeable = False  # decode_kernel is compiled for read-only input
                scanned = scan_window(data, 0, want, source, pos)
                if not len(scanned.table):
                    if pos + want >= size:
                        raise CorruptRecordError(
                            "a partial batch at the end of a closed segment",
                            source=source,
                            position=pos,
                            base_offset=scanned.base_offset,
                        )
                    self.window_bytes = max(self.window_bytes, scanned.needed)  # a large batch
                    continue
                table, consumed = scanned.table, scanned.end
                self._verify_crcs(source, pos, data, table)
                yield Window(data[:consumed], table, pos, pos + consumed >= size)
                pos += consumed
        finally:
            os.close(fd)

    @staticmethod
    def _verify_crcs(source: str, pos: int, data: np.ndarray, table: np.ndarray) -> None:
        """Refuse a window with a v2 batch whose CRC does not match: a batch the cleaner
        rewrites gets a new CRC, which would hide the damage."""
        v2 = table[table[:, es.S_MAGIC] == 2]
        bad = crc_mismatch(memoryview(data), v2)
        if bad is not None:
            row, stored, actual = bad
            raise CorruptRecordError(
                f"CRC mismatch: stored {stored:#010x}, computed {actual:#010x}",
                source=source,
                position=pos + int(v2[row, es.S_POS]),
                base_offset=int(v2[row, es.S_OFFSET]),
            )

    def _side_sections(self, window: Window, rows: np.ndarray, plan: np.ndarray) -> None:
        """Decompress the records sections of ``rows`` into the side buffer (``P_SRC`` 1)."""
        data = window.data
        sections = []
        total = 0
        for r in rows.tolist():
            pos, size = int(plan[r, ck.P_POS]), int(plan[r, ck.P_SIZE])
            codec_id = int(plan[r, ck.P_ATTR]) & CODEC_MASK
            where = str(window.position + pos)
            try:
                codec = CompressionType(codec_id)
                raw = decompress(codec, memoryview(data)[pos + RECORD_BATCH_OVERHEAD : pos + size])
            except (ValueError, CorruptRecordError) as e:
                raise CorruptRecordError(
                    f"records of a compressed batch do not decompress: {e}",
                    position=window.position + pos,
                    base_offset=int(plan[r, ck.P_BASE_OFFSET]),
                    source=where,
                ) from None
            sections.append((r, raw))
            total += len(raw)
        if len(self._side) < total:
            self._side = np.empty(max(total, 2 * len(self._side)), np.uint8)
        at = 0
        for r, raw in sections:
            self._side[at : at + len(raw)] = np.frombuffer(raw, np.uint8)
            plan[r, ck.P_SRC] = 1
            plan[r, ck.P_REC_START] = at
            plan[r, ck.P_REC_END] = at + len(raw)
            at += len(raw)

    def _base_plan(self, window: Window) -> np.ndarray:
        t = window.table
        plan = np.zeros((len(t), ck.PLAN_FIELDS), np.int64)
        plan[:, ck.P_POS] = t[:, es.S_POS]
        plan[:, ck.P_SIZE] = t[:, es.S_SIZE]
        plan[:, ck.P_REC_START] = t[:, es.S_POS] + RECORD_BATCH_OVERHEAD
        plan[:, ck.P_REC_END] = t[:, es.S_POS] + t[:, es.S_SIZE]
        plan[:, ck.P_BASE_OFFSET] = t[:, es.S_OFFSET]
        plan[:, ck.P_LAST_DELTA] = t[:, es.S_LAST_DELTA]
        plan[:, ck.P_COUNT] = t[:, es.S_COUNT]
        plan[:, ck.P_ATTR] = t[:, es.S_ATTR]
        plan[:, ck.P_BASE_TS] = t[:, es.S_BASE_TS]
        plan[:, ck.P_MAX_TS] = t[:, es.S_MAX_TS]
        legacy = t[:, es.S_MAGIC] != 2
        plan[legacy, ck.P_MODE] = ck.MODE_VERBATIM
        plan[legacy, ck.P_REC_START] = plan[legacy, ck.P_REC_END] = t[legacy, es.S_POS]
        compressed = ~legacy & ((t[:, es.S_ATTR] & CODEC_MASK) != 0) & (t[:, es.S_COUNT] > 0)
        if compressed.any():
            self._side_sections(window, np.nonzero(compressed)[0], plan)
        return plan

    def _decode_error(
        self, path: Path, window: Window, plan: np.ndarray, row: int, err: int, a: int, b: int
    ) -> CorruptRecordError:
        reason = _DECODE_ERRORS.get(err, "error code {a}").format(a=a, b=b)
        return CorruptRecordError(
            reason,
            source=str(path),
            position=window.position + int(plan[row, ck.P_POS]),
            base_offset=int(plan[row, ck.P_BASE_OFFSET]),
        )
