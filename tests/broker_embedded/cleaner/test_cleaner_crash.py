"""Kill -9 a cleaning process 50 times in a row on one log dir: every reopen recovers to whole
segments (old or cleaned, never a mix) and the log equals the model.

A worker (_crash_child.py) appends to a compacted partition and cleans it, round after round,
with an offset map of 64 slots (a round covers at most 57 keys of 120, so every pass over the
log takes several rounds, each swapping several groups of segments); it reports every
acknowledged batch. The parent SIGKILLs it 5-150 ms after it opened the log dir (every tenth time
0-30 ms after it was started, so also during its own recovery), then reopens the log dir (a
recovery, which settles an interrupted swap) and checks:

- no ``.cleaned``, ``.swap`` or ``.deleted`` file is left; every segment passes ``kafkalog dump
  --verify``'s checks (CRCs, offsets, index entries), and batches of consecutive segments never
  overlap (the offsets increase across the whole log);
- every record read (kafka-python) holds the value written at its offset (values name their
  key and offset; tombstones are checked against the reported keys);
- the latest offset per key (and whether it is a tombstone) equals the model's: the
  acknowledged records, plus those of an append that reached the file but was not yet reported;
- the ``cleaner-offset-checkpoint`` entry, when there is one, is within the log.
"""

from __future__ import annotations

import io
import random
import time
from pathlib import Path

from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from spark_kafkalog.dump_log import dump, verify_indexes

from .._zygote import Zygote
from ._crash_child import TP, create
from ._workload import SEGMENT_GLOB, read_batches

CHILD = "tests.broker_embedded.cleaner._crash_child"
RUNS = 50


def test_sigkill_a_cleaning_process_50_times(tmp_path: Path) -> None:
    seed = 20240612
    rng = random.Random(seed)
    log_dir = tmp_path / "logs"
    create(str(log_dir))
    acked: dict[int, int] = {}  # offset -> key index, -1 - key for a tombstone
    zygote = Zygote(CHILD, tmp_path / "zygote.stderr")
    started = time.monotonic()
    in_round = rounds = interrupted_swaps = 0
    try:
        for run in range(1, RUNS + 1):
            lines = zygote.run_and_kill(log_dir, run, seed, rng, latest=0.150)
            cleaning = False
            for line in lines:
                kind, *fields = line.split()
                if kind == b"B":
                    first = int(fields[0])
                    for i, key in enumerate(fields[1:]):
                        acked[first + i] = int(key)
                elif kind == b"S":
                    cleaning = True
                elif kind == b"C":
                    cleaning = False
                    rounds += 1
            in_round += cleaning
            directory = log_dir / TP.dir_name
            interrupted_swaps += any(p.suffix in (".swap", ".deleted") for p in directory.iterdir())
            acked.update(check_after_crash(log_dir, run, acked))
    finally:
        zygote.close()
    assert rounds >= 1, rounds  # the workers did finish rounds
    assert in_round >= 10, in_round  # and were often killed in the middle of a round
    assert dump([log_dir], io.StringIO(), verify=True, summary_only=True) == 0
    assert time.monotonic() - started < 60
    print(f"{rounds} rounds, {in_round} kills during a round, {interrupted_swaps} during a swap")


def check_after_crash(log_dir: Path, run: int, acked: dict[int, int]) -> dict[int, int]:
    """The checks of the module docstring; returns the records of an append that reached the
    file but was not reported (they are part of the log from now on)."""
    unreported = {}
    lm = LogManager(log_dir, owner="cleaner crash parent", create=True)
    try:
        lg = lm.get_log(TP)
        directory = log_dir / TP.dir_name
        left = [
            p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")
        ]
        assert left == [], f"run {run}: {left}"
        for segment in sorted(directory.glob(SEGMENT_GLOB)):
            verify_indexes(segment)
        batches = read_batches(directory)
        assert all(b.crc_valid for b in batches)
        offsets = [r.offset for b in batches for r in b.records]
        lasts = [b.last_offset for b in batches]
        assert lasts == sorted(set(lasts)) and offsets == sorted(set(offsets)), f"run {run}"
        assert (lasts[-1] + 1 if lasts else 0) == lg.log_end_offset
        tail = max(acked, default=-1)
        model: dict[int, tuple[int, bool]] = {}  # key -> (latest offset, tombstone)
        for offset in sorted(acked):
            k = acked[offset]
            model[k if k >= 0 else -1 - k] = (offset, k < 0)
        latest: dict[int, tuple[int, bool]] = {}
        for b in batches:
            for r in b.records:
                key = int(r.key[1:])
                if r.value is None:
                    assert r.offset > tail or acked[r.offset] == -1 - key, f"run {run}"
                else:
                    k, offset = r.value.split(b":")[:2]
                    assert (int(k), int(offset)) == (key, r.offset), f"run {run}: {r}"
                    assert r.offset > tail or acked[r.offset] == key, f"run {run}: {r}"
                latest[key] = (r.offset, r.value is None)
                if r.offset > tail:  # written, not yet reported when the worker died
                    model[key] = (r.offset, r.value is None)
                    unreported[r.offset] = -1 - key if r.value is None else key
        assert latest == model, f"run {run}"
        checkpoint = OffsetCheckpointFile(log_dir / "cleaner-offset-checkpoint").read_or_empty()
        assert checkpoint.get(TP, 0) <= lg.log_end_offset
    finally:
        lm.close(clean=False)
    return unreported
