"""The file names of a log segment (Kafka's ``LogFileUtils``): the 20-digit zero-padded stem
of a base offset (:func:`segment_file_stem`), its ``.log``, ``.index`` and ``.timeindex`` paths
(:func:`segment_paths`), the base offset back from a ``.log`` name
(:func:`parse_segment_log_name`), a segment's ``.txnindex`` (:func:`txn_index_of`) and the
identity of an opened file (:func:`file_id_of`, ``(st_dev, st_ino)``). Pure functions.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import TransactionIndex

LOG_SUFFIX = ".log"
_SEGMENT_LOG_NAME = re.compile(r"([0-9]{20})\.log")


def segment_file_stem(base_offset: int) -> str:
    """The 20-digit zero-padded name shared by a segment's files."""
    if base_offset < 0:
        raise ValueError(f"negative segment base offset {base_offset}")
    return f"{base_offset:020d}"


def file_id_of(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def parse_segment_log_name(name: str) -> int | None:
    """The base offset of a ``<20 digits>.log`` file name, else ``None`` (also for ``.swap``,
    ``.cleaned``, ``.deleted`` and other transient names)."""
    m = _SEGMENT_LOG_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def txn_index_of(log_path: Path, base_offset: int) -> TransactionIndex:
    return TransactionIndex(log_path.with_suffix(TXN_INDEX_SUFFIX), base_offset)


def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
    """The ``.log``, ``.index`` and ``.timeindex`` paths of the segment based at
    ``base_offset``."""
    stem = segment_file_stem(base_offset)
    return tuple(directory / (stem + s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX))
