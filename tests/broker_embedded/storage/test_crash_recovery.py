"""Kill -9 a writer 100 times in a row on one log dir: nothing acknowledged is ever lost.

A writer process (_crash_child.py) appends through a LogManager with acks=1 semantics and reports
every acknowledged batch on stdout; the parent SIGKILLs it 5-80 ms after it opened the log dir
(every tenth time 0-30 ms after it was started, so also during its own recovery). Writers are
forked by a zygote (``_zygote.py``): one fresh Python started with subprocess that imports the
storage modules once, so that a writer starts in milliseconds. A killed process loses nothing
from the page cache, so after each kill the parent reopens the log dir (a recovery: no
clean-shutdown marker) and checks:

- every segment as ``kafkalog dump --verify`` checks it (CRCs, offsets, index entries); a
  segment whose three files are byte for byte those of an already verified state is not checked
  again, and the whole log dir goes through the dump at the end;
- offsets contiguous from 0 to the log end offset, the HW on disk not above it;
- every acknowledged batch present at its offsets with the bytes the writer sent (from byte 21,
  which the leader never rewrites), and the values of this run's batches as kafka-python decodes
  them;
- the leader epoch cache, the producer state, the aborted transactions (``.txnindex``) and the
  LSO equal what a scan of the batches implies.
"""

from __future__ import annotations

import hashlib
import io
import random
import struct
import uuid
from pathlib import Path

import pytest

from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from spark_kafkalog.dump_log import dump, verify_indexes

from .._zygote import Zygote
from ..record._peers import kafka_python_read

CHILD = "tests.broker_embedded.storage._crash_child"
TP = TopicPartition("crash", 0)
RUNS = 100
HEADER = struct.Struct(">qiibIhiqqqhii")
CONFIG = {"segment.bytes": "65536", "index.interval.bytes": "512"}


def batches_on_disk(directory: Path) -> tuple[bytes, list[tuple]]:
    """The partition's bytes and (position, size, base, last, epoch, attributes, producer id,
    base sequence, count) per batch, walked with struct only."""
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("[0-9]" * 20 + ".log")))
    out, pos = [], 0
    while pos < len(data):
        base, length, epoch, magic, _, attrs, delta, _, _, pid, _, seq, count = HEADER.unpack_from(
            data, pos
        )
        assert magic == 2
        out.append((pos, 12 + length, base, base + delta, epoch, attrs, pid, seq, count))
        pos += 12 + length
    assert pos == len(data)
    return data, out


@pytest.mark.slow  # 100 kills and recoveries
def test_sigkill_100_times_loses_no_acknowledged_record(tmp_path: Path) -> None:
    seed = 20240611
    rng = random.Random(seed)
    log_dir = tmp_path / "logs"
    lm = LogManager(log_dir, owner="crash parent", create=True)
    lm.put_topic(TP.topic, TopicEntry(uuid.UUID(int=0xC0FFEE), 1, 1, CONFIG))
    lm.get_or_create_log(TP)
    lm.close(clean=False)
    acked: dict[int, tuple[int, str, str]] = {}  # last offset -> (first, raw hash, values hash)
    markers: dict[int, tuple[bytes, int]] = {}  # offset -> (kind, producer id)
    verified: set[str] = set()  # content hashes of segments that passed verification
    zygote = Zygote(CHILD, tmp_path / "zygote.stderr")
    try:
        for run in range(1, RUNS + 1):
            lines = zygote.run_and_kill(log_dir, run, seed, rng, latest=0.080)
            new = {}
            for line in lines:
                kind, *fields = line.split()
                if kind == b"B":
                    first, last = int(fields[0]), int(fields[1])
                    new[last] = (first, fields[2].decode(), fields[3].decode())
                elif kind == b"M":
                    markers[int(fields[0])] = (fields[1], int(fields[2]))
            acked.update(new)
            check_after_crash(log_dir, run, acked, new, markers, verified)
    finally:
        zygote.close()
    assert len(acked) > 10 * RUNS, len(acked)  # the writers did get to append
    assert dump([log_dir], io.StringIO(), verify=True, summary_only=True) == 0


def control_type(data: bytes, pos: int) -> int:
    """The type (0 ABORT, 1 COMMIT) in the key of the marker batch at ``pos``: its one record
    starts at 61 with five one-byte fields (length, attributes, timestamp delta, offset delta,
    key length), then the key: int16 version, int16 type."""
    return struct.unpack_from(">h", data, pos + 61 + 5 + 2)[0]


def check_after_crash(
    log_dir: Path,
    run: int,
    acked: dict[int, tuple[int, str, str]],
    new: dict[int, tuple[int, str, str]],
    markers: dict[int, tuple[bytes, int]],
    verified: set[str],
) -> None:
    hw_on_disk = OffsetCheckpointFile(log_dir / "replication-offset-checkpoint").read_or_empty()
    lm = LogManager(log_dir, owner="crash parent", create=True)
    try:
        assert lm.had_clean_shutdown is False
        lg = lm.get_log(TP)
        leo = lg.log_end_offset
        assert hw_on_disk.get(TP, 0) <= leo, f"run {run}: HW {hw_on_disk} above LEO {leo}"
        for segment in sorted((log_dir / TP.dir_name).glob("[0-9]" * 20 + ".log")):
            content = hashlib.sha256(segment.name.encode())
            for suffix in (".log", ".index", ".timeindex"):
                content.update(segment.with_suffix(suffix).read_bytes() + b"|")
            if content.hexdigest() not in verified:
                verify_indexes(segment)  # what `kafkalog dump --verify` checks per segment
                verified.add(content.hexdigest())
        data, batches = batches_on_disk(log_dir / TP.dir_name)
        # Leader-assigned offsets: contiguous from 0 to the log end.
        assert [b[2] for b in batches] == [0, *(b[3] + 1 for b in batches)][: len(batches)]
        assert (batches[-1][3] + 1 if batches else 0) == leo
        by_last = {b[3]: b for b in batches}
        for last, (first, raw_hash, values_hash) in acked.items():
            assert last in by_last, f"run {run}: acknowledged batch {first}-{last} is lost"
            pos, size, base = by_last[last][:3]
            assert base == first
            assert hashlib.sha256(data[pos + 21 : pos + size]).hexdigest() == raw_hash
            if last in new:
                (peer,) = kafka_python_read(data[pos : pos + size])
                values = b"".join(r.value for r in peer.records)
                assert hashlib.sha256(values).hexdigest() == values_hash
        for offset, (kind, pid) in markers.items():
            pos, size, base, last, _, attrs, batch_pid = by_last[offset][:7]
            assert (base, attrs & 0x30, batch_pid) == (offset, 0x30, pid)
            assert control_type(data, pos) == (1 if kind == b"commit" else 0)
        # Leader epochs, producer state, aborted transactions and LSO, as the batches imply.
        last_seq, open_txns, aborted, epochs = {}, {}, [], []
        for pos, _, base, _last, epoch, attrs, pid, seq, count in batches:
            if not epochs or epochs[-1][0] != epoch:
                epochs.append((epoch, base))
            if attrs & 0x20:  # a COMMIT or ABORT marker
                first = open_txns.pop(pid, None)
                is_abort = control_type(data, pos) == 0
                if first is not None and is_abort:
                    aborted.append((pid, first, base))
                continue
            last_seq[pid] = seq + count - 1
            if attrs & 0x10:
                open_txns.setdefault(pid, base)
        assert [(e.epoch, e.start_offset) for e in lg.leader_epoch_cache.entries()] == epochs
        producers = lg.producer_state.producers
        assert {pid: e.last_seq for pid, e in producers.items()} == last_seq
        assert lg.producer_state.ongoing_transactions() == open_txns
        found = lg.collect_aborted_transactions(0, leo)
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in found] == aborted
        lg.update_high_watermark(leo)
        assert lg.last_stable_offset == min(open_txns.values(), default=leo)
        lm.checkpoint()
    finally:
        lm.close(clean=False)
