"""What an append did (Kafka's ``LogAppendInfo``): the offsets it got, its max timestamp and log
append time, the log start offset after it, and its records and bytes; for a duplicate of an
idempotent batch, the original batch's offsets and timestamp with ``duplicate=True``. A frozen
value: safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did: the offsets it got (the original ones for a duplicate)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_records: int
    size: int
    duplicate: bool = False
