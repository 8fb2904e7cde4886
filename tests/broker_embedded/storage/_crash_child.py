"""The writer that test_crash_recovery.py kills: appends to one partition until SIGKILL.

``python -m tests.broker_embedded.storage._crash_child`` starts a zygote (``_zygote.py``: the
line protocol): a fresh Python that imports only the storage and record modules (about 0.3 s)
and loads the append's compiled kernel, then forks a writer per ``LOG_DIR RUN SEED`` line on
stdin.

A writer opens the log dir with a LogManager (the previous writer was killed, so this is a
recovery), prints ``ready`` and appends as a leader with epoch RUN until it is killed:
idempotent batches of producer ``1_000_000 + RUN`` and, now and then, a transaction of producer
``2_000_000 + RUN`` ended by a COMMIT or ABORT marker (origin COORDINATOR). After each append
returned (acks=1: acknowledged) it moves the HW to the log end and writes one line to stdout
with a single ``os.write`` (atomic on a pipe for lines this short)::

    B <first offset> <last offset> <sha256 of the batch from byte 21> <sha256 of its values>
    M <offset> <commit|abort> <producer id>

Bytes 21.. (attributes to the end) are the part of a batch the leader never rewrites.
"""

from __future__ import annotations

import hashlib
import os
import random
import time

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.topic_partition import TopicPartition

from .._zygote import serve

TP = TopicPartition("crash", 0)


def append_until_killed(log_dir: str, run: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + run)
    lm = LogManager(log_dir, checkpoint_interval_ms=10, owner=f"crash writer {run}", create=True)
    lg = lm.get_or_create_log(TP)
    os.write(1, b"ready\n")
    idem_pid, txn_pid = 1_000_000 + run, 2_000_000 + run
    seq = txn_seq = 0
    in_txn = False
    while True:
        ts = time.time_ns() // 1_000_000  # producers expire a day after their last timestamp
        if in_txn and rng.random() < 0.3:
            commit = rng.random() < 0.5
            m = EndTransactionMarker.commit(run) if commit else EndTransactionMarker.abort(run)
            raw = m.build_batch(base_offset=0, timestamp=ts, producer_id=txn_pid, producer_epoch=0)
            info = lg.append_as_leader(raw, run, AppendOrigin.COORDINATOR)
            kind = b"commit" if commit else b"abort"
            line = b"M %d %s %d\n" % (info.first_offset, kind, txn_pid)
            in_txn = False
        else:
            transactional = in_txn or rng.random() < 0.08
            pid = txn_pid if transactional else idem_pid
            base_seq = txn_seq if transactional else seq
            codec = CompressionType.GZIP if rng.random() < 0.1 else CompressionType.NONE
            builder = MemoryRecordsBuilder(
                0,
                codec,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=base_seq,
                is_transactional=transactional,
            )
            values = [rng.randbytes(rng.randint(10, 120)) for _ in range(rng.randint(1, 4))]
            for v in values:
                builder.append(None, ts, b"k%d" % rng.randint(0, 9), v)
            raw = builder.build()
            info = lg.append_as_leader(raw, run)
            if transactional:
                txn_seq += len(values)
                in_txn = True
            else:
                seq += len(values)
            line = b"B %d %d %s %s\n" % (
                info.first_offset,
                info.last_offset,
                hashlib.sha256(raw[21:]).hexdigest().encode(),
                hashlib.sha256(b"".join(values)).hexdigest().encode(),
            )
        lg.update_high_watermark(lg.log_end_offset)
        os.write(1, line)


if __name__ == "__main__":
    serve(append_until_killed)
