"""The CRC-32C check of a run's v2 batches for the columnar decoder (:class:`CrcCheck`): at once
for small runs; for runs of :data:`PARALLEL_CRC_BYTES` or more on a helper thread, overlapping
decompression and the kernel. :func:`crc_mismatch` finds the first batch whose stored CRC (over
the bytes from the attributes field to the batch's end) differs from the computed one.

Thread safety: :class:`CrcCheck` owns its helper thread and hands its error over in
:meth:`CrcCheck.wait`; the input must not change until then.
"""

from __future__ import annotations

import threading

import crc32c
import numpy as np

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import ATTRIBUTES_OFFSET
from broker_embedded.record.decode_plan import Where

# Runs with at least this many bytes of batches to check get their CRCs checked on a thread.
PARALLEL_CRC_BYTES = 4 * 1024 * 1024


class CrcCheck:
    """The CRC-32C check of v2 batches: at once for small runs; for large ones on a helper
    thread, overlapping decompression and the kernel (which release the GIL) on another core
    (measured: 40-45 ms instead of 53-65 ms for 1 M records). :meth:`wait` raises the first
    mismatch."""

    def __init__(self, view: memoryview, entries: np.ndarray, where: Where, enabled: bool):
        self._error: CorruptRecordError | None = None
        self._thread: threading.Thread | None = None
        if not enabled:
            return
        if int(entries[:, es.S_SIZE].sum()) < PARALLEL_CRC_BYTES:
            _verify_crcs(view, entries, where, release_gil=-1)
            return
        self._thread = threading.Thread(
            target=self._run, args=(view, entries, where), name="kafkalog-crc", daemon=True
        )
        self._thread.start()

    def _run(self, view: memoryview, entries: np.ndarray, where: Where) -> None:
        try:
            # releasing the GIL in every call lets the decoding thread go on at once
            _verify_crcs(view, entries, where, release_gil=1)
        except CorruptRecordError as e:
            self._error = e

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error


def crc_mismatch(
    view: memoryview, entries: np.ndarray, release_gil: int = -1
) -> tuple[int, int, int] | None:
    """The first v2 batch of ``entries`` (a ``decode_kernel.scan_entries`` table of ``view``)
    whose CRC-32C (``record_batch.crc32c_of``'s computation) differs from the stored one, as
    (row, stored, computed); None when all match. ``release_gil`` is the ``crc32c`` package's
    ``gil_release_mode``."""
    positions = entries[:, es.S_POS].tolist()
    ends = (entries[:, es.S_POS] + entries[:, es.S_SIZE]).tolist()
    crcs = entries[:, es.S_CRC].tolist()
    for i, (pos, end, stored) in enumerate(zip(positions, ends, crcs, strict=True)):
        actual = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : end], gil_release_mode=release_gil)
        if actual != stored:
            return i, stored, actual
    return None


def _verify_crcs(view: memoryview, entries: np.ndarray, where: Where, release_gil: int) -> None:
    """Raise for the first batch whose CRC does not match (:func:`crc_mismatch`)."""
    bad = crc_mismatch(view, entries, release_gil)
    if bad is not None:
        i, stored, actual = bad
        reason = f"CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"
        raise where.corrupt(reason, int(entries[i, es.S_POS]), int(entries[i, es.S_OFFSET]))
