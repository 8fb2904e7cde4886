"""The cleaning process that test_cleaner_crash.py kills: appends and cleans until SIGKILL.

``python -m tests.broker_embedded.cleaner._crash_child`` starts a zygote (``_zygote.py``: the
line protocol): a fresh Python that imports the storage and cleaner modules and runs one small
cleaning (so that the compiled kernels are loaded), then forks a worker per ``LOG_DIR RUN SEED``
line on stdin (a worker starts in milliseconds).

A worker opens the log dir with a LogManager (a recovery: the previous worker was killed),
prints ``ready`` and loops until killed: a few appends to the compacted partition (keys
``k0``..``k{KEYS-1}``, some tombstones), each reported after it returned, then one cleaning
round with a small offset map (several rounds and groups per pass over the log) through
``LogCleaner.clean_log``, which swaps segments and writes ``cleaner-offset-checkpoint``. Lines
(one ``os.write`` each, atomic on a pipe)::

    B <first offset> <key index or -1 for a tombstone's key ...>   an acknowledged batch
    S                                                               a cleaning round starts
    C <end offset>                                                  ... and ended

Values describe themselves: ``<key index>:<offset>:`` and padding, or null for a tombstone (its
key is in the ``B`` line), so the parent checks every record it reads.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid

from broker_embedded.cleaner.log_cleaner_manager import LogCleaner, LogCleanerConfig
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition

from .._zygote import serve

TP = TopicPartition("compacted", 0)
KEYS = 120
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "3000", "index.interval.bytes": "256"}
CLEANER = LogCleanerConfig(dedupe_buffer_size=24 * 64, load_factor=0.9)  # 57 keys a round


def value_of(key: int, offset: int, rng: random.Random) -> bytes:
    return b"%d:%d:" % (key, offset) + b"x" * rng.randint(0, 40)


def create(log_dir: str) -> None:
    lm = LogManager(log_dir, owner="cleaner crash setup", create=True)
    lm.put_topic(TP.topic, TopicEntry(uuid.UUID(int=0xC1EA), 1, 1, CONFIG))
    lm.get_or_create_log(TP)
    lm.close(clean=False)


def work(log_dir: str, run: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + run)
    lm = LogManager(
        log_dir, checkpoint_interval_ms=5, owner=f"cleaner crash worker {run}", create=True
    )
    lg = lm.get_or_create_log(TP)
    cleaner = LogCleaner(CLEANER, log_dir, lambda: dict(lm.logs))
    c = cleaner.new_cleaner()
    os.write(1, b"ready\n")
    while True:
        for _ in range(rng.randint(1, 6)):
            ts = time.time_ns() // 1_000_000
            builder = MemoryRecordsBuilder(0)
            keys = []
            base = lg.log_end_offset
            for i in range(rng.randint(1, 4)):
                key = rng.randrange(KEYS)
                tombstone = rng.random() < 0.1
                value = None if tombstone else value_of(key, base + i, rng)
                builder.append(None, ts, b"k%d" % key, value)
                keys.append(-1 - key if tombstone else key)
            info = lg.append_as_leader(builder.build(), run)
            assert info.first_offset == base
            lg.update_high_watermark(lg.log_end_offset)
            os.write(1, b"B %d %s\n" % (info.first_offset, b" ".join(b"%d" % k for k in keys)))
        lg.roll()
        os.write(1, b"S\n")
        result = cleaner.clean_log(TP, c)
        os.write(1, b"C %d\n" % (-1 if result is None else result.end_offset))


def warm_up() -> None:
    """Load the compiled kernels in the zygote: one small cleaning in a scratch log dir."""
    with tempfile.TemporaryDirectory() as d:
        create(d)
        lm = LogManager(d, owner="cleaner crash warm-up", create=True)
        lg = lm.get_or_create_log(TP)
        for i in range(20):
            b = MemoryRecordsBuilder(0)
            b.append(None, 0, b"k%d" % (i % 3), b"v")
            lg.append_as_leader(b.build(), 0)
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        LogCleaner(CLEANER, d, lambda: dict(lm.logs)).clean_log(TP)
        lm.close()


if __name__ == "__main__":
    warm_up()
    serve(work)
