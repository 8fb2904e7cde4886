"""The log's one-pass append (record/log_validator.py) against its Python path, on hostile input.

Each case appends the same bytes to two logs: one as the broker runs it, one whose fast path is
switched off (every batch walked and checked in Python, as before the kernel). Both must answer
the same: the same error type and message, or the same offsets, and the same files on disk
(segments, indexes, leader epochs). Inputs: valid produce requests and fetch responses, cut at
every position, and with every header byte changed."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_embedded.errors import KafkaLogError
from broker_embedded.record import log_validator
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import summarize_records
from broker_embedded.storage.unified_log import UnifiedLog

from .test_unified_log import Clock, client_batch, marker, open_log, part_dir

HEADER = 61
MAGIC = 16


def _pair(tmp_path: Path, overrides: dict | None = None) -> tuple[UnifiedLog, UnifiedLog]:
    fast = open_log(tmp_path / "fast", overrides, Clock())
    slow = open_log(tmp_path / "slow", overrides, Clock())
    slow._scan_as_leader = lambda buf, origin, epoch: None  # type: ignore[method-assign]

    def follower_in_python(records: bytes) -> object:
        with slow._lock:
            return slow._append_as_follower_checked_in_python(memoryview(records).toreadonly())

    slow.append_as_follower = follower_in_python  # type: ignore[method-assign]
    return fast, slow


def _outcome(log: UnifiedLog, call: object) -> tuple:
    """("ok", what the call returned) or ("error", type, message with the log's dir left out)."""
    try:
        info = call()  # type: ignore[operator]
    except (KafkaLogError, ValueError) as e:
        return ("error", type(e).__name__, str(e).replace(str(log.log_dir), "<dir>"))
    return ("ok", info)


def _files(log: UnifiedLog) -> dict[str, bytes]:
    """The partition's files (appends and index entries are written at once, unbuffered)."""
    d = part_dir(log.log_dir)
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if not p.name.endswith(".snapshot")}


def _same(fast: UnifiedLog, slow: UnifiedLog, request: bytes, method: str) -> str:
    if method == "leader":
        got = [_outcome(lg, lambda lg=lg: lg.append_as_leader(request, 3)) for lg in (fast, slow)]
    else:
        got = [_outcome(lg, lambda lg=lg: lg.append_as_follower(request)) for lg in (fast, slow)]
    assert got[0] == got[1], request.hex()
    assert fast.log_end_offset == slow.log_end_offset
    return got[0][0]


def _mutations(request: bytes, batch_starts: list[int], cut_every: int = 1) -> list[bytes]:
    """Cuts (at every byte of each batch's first 20, and every ``cut_every`` bytes), and every
    header byte of every batch changed (to 0x00, 0xFF and flipped under the CRC)."""
    cuts = set(range(0, len(request), cut_every))
    cuts.update(at for start in batch_starts for at in range(start, start + 20))
    out = [request[:n] for n in sorted(cuts)]
    for start in batch_starts:
        for at in range(start, start + HEADER):
            # bytes 0-16 (offset, length, epoch, magic) are not under the CRC: one change each
            values = {0xFF} if at - start <= MAGIC else {0x00, 0xFF, request[at] ^ 0x01}
            for value in values:
                out.append(request[:at] + bytes([value]) + request[at + 1 :])
    return out


def _request() -> tuple[bytes, list[int]]:
    first = client_batch([b"a", b"bb", b"ccc"])
    second = client_batch([b"d" * 40], pid=7, epoch=0, seq=0)
    third = client_batch([b"e", None], ts=5, txn=True, pid=9, epoch=1, seq=0)
    return first + second + third, [0, len(first), len(first) + len(second)]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"message.timestamp.type": "LogAppendTime", "max.message.bytes": "150"}],
    ids=["default", "log_append_time_and_small_max"],
)
def test_leader_fast_path_answers_as_the_python_path(tmp_path: Path, overrides: dict) -> None:
    fast, slow = _pair(tmp_path, overrides)
    request, starts = _request()
    seen = {_same(fast, slow, m, "leader") for m in _mutations(request, starts)}
    seen.add(_same(fast, slow, request, "leader"))
    assert seen == {"ok", "error"}
    for origin in (AppendOrigin.CLIENT, AppendOrigin.COORDINATOR):  # a marker: only from one
        got = [
            _outcome(lg, lambda lg=lg, o=origin: lg.append_as_leader(marker(False, 9), 3, o))
            for lg in (fast, slow)
        ]
        assert got[0] == got[1]
    assert _files(fast) == _files(slow)
    assert fast.leader_epoch_cache.entries() == slow.leader_epoch_cache.entries()
    assert fast.producer_state.producers == slow.producer_state.producers
    assert fast.last_stable_offset == slow.last_stable_offset
    fast.close()
    slow.close()


def test_follower_fast_path_answers_as_the_python_path(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader", None, Clock())
    request, _ = _request()
    leader.append_as_leader(request, 4)
    leader.append_as_leader(client_batch([b"later"]), 6)
    response = b"".join(bytes(b.buffer) for b in leader.batches())
    starts = [0]
    for b in leader.batches()[:-1]:
        starts.append(starts[-1] + b.size_in_bytes)
    fast, slow = _pair(tmp_path)
    outcomes = set()
    for mutated in [response, *_mutations(response, starts, cut_every=7)]:
        for lg in (fast, slow):
            if lg.log_end_offset:
                lg.truncate_fully_and_start_at(0)
        outcomes.add(_same(fast, slow, mutated, "follower"))
        assert _files(fast) == _files(slow)
        assert fast.leader_epoch_cache.entries() == slow.leader_epoch_cache.entries()
    assert outcomes == {"ok", "error"}
    # Batches below the log end offset are skipped; the rest follow.
    for lg in (fast, slow):
        lg.truncate_fully_and_start_at(0)
        lg.append_as_follower(response[: starts[2]])
    assert _same(fast, slow, response, "follower") == "ok"
    assert fast.log_end_offset == leader.log_end_offset
    assert _files(fast)["00000000000000000000.log"] == _files(leader)["00000000000000000000.log"]
    assert fast.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()
    for lg in (leader, fast, slow):
        lg.close()


def test_scan_summarizes_as_the_segment_writer(tmp_path: Path) -> None:
    """Offsets, record count and the offset of the max timestamp (first batch reaching it)
    equal summarize_records' on the rewritten batches."""
    import numpy as np

    batches = [client_batch([b"x"] * n, ts=ts) for n, ts in ((3, 50), (1, 90), (2, 90), (4, 10))]
    buf = bytearray(b"".join(batches))
    table, s = log_validator.scan(
        np.frombuffer(buf, np.uint8), len(buf), log_validator.LEADER, 100, 1 << 20, True
    )
    assert s[log_validator.S_OK] == 1
    log_validator.assign(np.frombuffer(buf, np.uint8), table, 2)
    expected = summarize_records(bytes(buf), "test")
    lv = log_validator
    got = [
        int(s[i]) for i in (lv.S_FIRST_OFFSET, lv.S_LAST_OFFSET, lv.S_MAX_TS, lv.S_OFFSET_OF_MAX_TS)
    ]
    assert expected is not None
    assert (
        got
        == [
            expected.first_offset,
            expected.last_offset,
            expected.max_timestamp,
            expected.offset_of_max_timestamp,
        ]
        == [100, 109, 90, 103]
    )
    assert int(s[log_validator.S_RECORDS]) == 10
    assert [struct.unpack_from(">qii", buf, int(p))[::2] for p in table[:, 0]] == [
        (100, 2),
        (103, 2),
        (104, 2),
        (106, 2),
    ]
