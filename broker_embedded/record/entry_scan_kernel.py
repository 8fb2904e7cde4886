"""The one header walk compiled: ``numba.njit`` of ``entry_scan.walk_entries`` and
``entry_scan.seek_entry`` themselves (not a copy), for the kernels that walk inside compiled code
(``decode_kernel``, the cleaner's) and, from this module's import on, for the Python callers of
``entry_scan.walk`` / ``seek`` / ``scan_window`` in this process (``entry_scan.use_compiled``).

The walk's reads (``header_reads``) compile to ``kernel_primitives``' reads through the numba
overloads that module registers; importing this module imports numba. ``kafkalog serve`` does
not import it on its request path; a Spark read, the columnar decoder and the cleaner do.

Thread safety: numba's dispatchers compile under one lock; the compiled functions release the
GIL.
"""

from __future__ import annotations

import numpy as np
from numba.extending import overload

from broker_embedded.record import entry_scan as es
from broker_embedded.record import kernel_primitives as kp  # the reads' overloads
from broker_embedded.record.batch_layout import (
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
)

walk_entries = kp.jit(es.walk_entries)


@overload(es.walk_entries)
def _walk_entries(buf, start, end, v2_only, limit, seek, target, table):  # type: ignore[no-untyped-def]
    """``entry_scan.walk_entries`` called inside a kernel (``seek_entry``'s body): compiled."""
    return lambda buf, start, end, v2_only, limit, seek, target, table: walk_entries(
        buf, start, end, v2_only, limit, seek, target, table
    )


seek_entry = kp.jit(es.seek_entry)
es.use_compiled(walk_entries, seek_entry)


def warm_up() -> None:
    """Compile the walk for the argument types its Python callers give it (read-only input:
    ``header_reads.readonly_bytes``; writable input: the log validator's, which assigns offsets
    in place), and the seek, on one empty v2 batch header."""
    header = bytearray(RECORD_BATCH_OVERHEAD)
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
    header[BATCH_LENGTH_OFFSET:LOG_OVERHEAD] = length.to_bytes(4, "big")
    header[MAGIC_OFFSET] = 2
    buf = kp.readonly_bytes(bytes(header))
    es.scan_window(buf, 0, len(buf), "<warm-up>", 0)
    table = np.empty((1, es.SCAN_FIELDS), np.int64)
    for walked in (buf, np.frombuffer(header, np.uint8)):
        walk_entries(walked, 0, len(walked), False, 1, False, 0, table)
    seek_entry(buf, 0, len(buf), es.NO_TARGET)
