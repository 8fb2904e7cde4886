"""The leader epoch cache: Kafka's assign, truncation and end-offset rules (known answers from
Kafka's own behaviour), the exact checkpoint bytes it writes, and reloading from disk."""

from __future__ import annotations

import logging
import threading
from itertools import pairwise
from pathlib import Path

import pytest

from broker_embedded.errors import CheckpointError
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
)
from broker_embedded.storage.leader_epoch_file_cache import (
    MAX_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
    LeaderEpochOverflowError,
)
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import BITNAMI

TP = TopicPartition("TestTopic", 5)
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def new_cache(tmp_path: Path, *assigned: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(TP, tmp_path / LEADER_EPOCH_CHECKPOINT)
    for epoch, start in assigned:
        cache.assign(epoch, start)
    return cache


def pairs(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries()]


def file_bytes(cache: LeaderEpochFileCache) -> bytes:
    return cache.path.read_bytes()


# -- loading and persistence ----------------------------------------------------------------------


def test_missing_file_is_an_empty_cache_and_is_not_created(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)
    assert cache.entries() == []
    assert cache.latest_entry is None
    assert cache.latest_epoch is None
    assert not cache.path.exists()


def test_assign_writes_the_exact_checkpoint_bytes(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (0, 0))
    assert file_bytes(cache) == b"0\n1\n0 0\n"
    cache.assign(1, 10)
    cache.assign(3, 20)
    assert file_bytes(cache) == b"0\n3\n0 0\n1 10\n3 20\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEADER_EPOCH_CHECKPOINT]  # no .tmp


def test_reload_from_disk(tmp_path: Path) -> None:
    new_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    again = new_cache(tmp_path)
    assert again.entries() == [EpochEntry(2, 6), EpochEntry(3, 8), EpochEntry(4, 11)]
    assert again.latest_entry == EpochEntry(4, 11)
    assert again.latest_epoch == 4


def test_a_kafka_written_checkpoint_loads_and_rewrites_byte_for_byte(bitnami_copy: Path) -> None:
    path = bitnami_copy / "__cluster_metadata-0" / LEADER_EPOCH_CHECKPOINT
    original = (BITNAMI / "__cluster_metadata-0" / LEADER_EPOCH_CHECKPOINT).read_bytes()
    cache = LeaderEpochFileCache(TopicPartition("__cluster_metadata", 0), path)
    assert pairs(cache) == [(1, 0), (2, 3442), (3, 3612), (4, 14667), (5, 21698)]
    assert cache.end_offset_for(3, 30000) == (3, 14667)
    assert cache.end_offset_for(6, 30000) == UNDEFINED
    cache.assign(6, 30000)
    assert path.read_bytes() == original.replace(b"\n5\n", b"\n6\n") + b"6 30000\n"
    cache.truncate_from_end(30000)
    assert path.read_bytes() == original


def test_load_replays_assign_so_a_non_monotonic_file_loads_as_its_history(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    data = b"0\n3\n1 5\n2 6\n1 7\n"
    path.write_bytes(data)
    cache = LeaderEpochFileCache(TP, path)
    assert pairs(cache) == [(1, 7)]
    assert path.read_bytes() == data  # loading never writes


def test_load_rejects_a_negative_entry(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n1\n-1 5\n")
    with pytest.raises(CheckpointError, match=r"TestTopic-5.*epoch -1, start offset 5"):
        LeaderEpochFileCache(TP, path)


def test_load_reports_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n2\n1 5\n")
    with pytest.raises(CheckpointError, match="header says 2 entries"):
        LeaderEpochFileCache(TP, path)


# -- assign ----------------------------------------------------------------------------------------


def test_same_epoch_at_a_later_offset_changes_nothing_and_writes_nothing(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (2, 6))
    cache.path.write_bytes(b"marker")  # a rewrite would replace it
    cache.assign(2, 7)
    cache.assign(2, 10)
    cache.assign(2, 6)
    assert pairs(cache) == [(2, 6)]
    assert file_bytes(cache) == b"marker"


def test_same_epoch_at_an_earlier_offset_moves_its_start(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (5, 11), (6, 12), (7, 13))
    cache.assign(7, 12)  # (6, 12) starts where (7, 12) does: displaced
    assert pairs(cache) == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)
    assert file_bytes(cache) == b"0\n2\n5 11\n7 12\n"


def test_new_epoch_at_the_same_offset_replaces_the_latest(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (2, 9), (3, 9))
    assert pairs(cache) == [(3, 9)]
    cache.clear_and_flush()
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert pairs(cache) == [(1, 0)]
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert cache.end_offset_for(0, 5) == (0, 0)  # below the first epoch: the first start


def test_older_epoch_truncates_the_conflicting_entries(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (1, 5), (2, 6))
    cache.assign(1, 7)
    assert pairs(cache) == [(1, 7)]
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED


def test_lower_offset_truncates_the_conflicting_entries(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (0, 0), (2, 6))
    cache.assign(3, 5)
    assert pairs(cache) == [(0, 0), (3, 5)]
    assert file_bytes(cache) == b"0\n2\n0 0\n3 5\n"


def test_divergent_history_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = new_cache(tmp_path, (1, 5), (2, 6))
    with caplog.at_level(logging.WARNING, "broker_embedded.storage.leader_epoch_file_cache"):
        cache.assign(3, 6)  # routine: epoch 2 wrote nothing
        assert caplog.records == []
        cache.assign(1, 7)
    assert "TestTopic-5" in caplog.text and "EpochEntry(epoch=1, start_offset=7)" in caplog.text


def test_negative_epoch_is_ignored(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (-1, 0))
    assert cache.entries() == []
    assert not cache.path.exists()
    cache.assign(0, 0)
    cache.assign(-1, 5)
    assert pairs(cache) == [(0, 0)]


@pytest.mark.parametrize(("epoch", "start"), [(0, -1), (1 << 31, 0), (0, 1 << 63)])
def test_invalid_entries_are_refused(tmp_path: Path, epoch: int, start: int) -> None:
    cache = new_cache(tmp_path)
    with pytest.raises(ValueError, match="TestTopic-5"):
        cache.assign(epoch, start)
    assert cache.entries() == []


def test_epochs_tracked_as_a_follower_appends_many_batches(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)
    for epoch, offsets in ((0, range(0, 3)), (1, range(3, 6)), (2, range(6, 9))):
        for offset in offsets:
            cache.assign(epoch, offset)
    assert pairs(cache) == [(0, 0), (1, 3), (2, 6)]
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


# -- lookups ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(0, (0, 10)), (1, (1, 20)), (2, (1, 20)), (3, (3, 30)), (4, UNDEFINED), (-1, UNDEFINED)],
)
def test_end_offset_for(tmp_path: Path, requested: int, expected: tuple[int, int]) -> None:
    cache = new_cache(tmp_path, (0, 0), (1, 10), (3, 20))
    assert cache.end_offset_for(requested, 30) == expected


def test_end_offset_for_an_epoch_below_the_first_is_the_first_start(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 0) == (4, 11)
    assert cache.end_offset_for(0, 0) == (0, 11)


def test_end_offset_for_a_gap_between_epochs(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)
    assert cache.end_offset_for(5, 0) == UNDEFINED


def test_end_offset_for_on_an_empty_cache_is_undefined(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 73) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (1, 5), (3, 10), (4, 20))
    got = {offset: cache.epoch_for_offset(offset) for offset in (0, 4, 5, 6, 9, 10, 19, 20, 99)}
    assert got == {0: None, 4: None, 5: 1, 6: 1, 9: 1, 10: 3, 19: 3, 20: 4, 99: 4}
    cache.clear_and_flush()
    assert cache.epoch_for_offset(0) is None


# -- truncation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end_offset", "expected"),
    [
        (8, [(2, 6)]),  # on an epoch boundary
        (9, [(2, 6), (3, 8)]),  # inside an epoch
        (11, [(2, 6), (3, 8)]),
        (12, [(2, 6), (3, 8), (4, 11)]),  # past the last start: nothing to do
        (6, []),
        (0, []),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_end(tmp_path: Path, end_offset: int, expected: list) -> None:
    cache = new_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end_offset)
    assert pairs(cache) == expected
    assert new_cache(tmp_path).entries() == cache.entries()  # written through


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (8, [(3, 8), (4, 11)]),  # on an epoch boundary
        (9, [(3, 9), (4, 11)]),  # inside an epoch: its start moves
        (11, [(4, 11)]),
        (15, [(4, 15)]),  # past the last start: the latest epoch is kept
        (6, [(2, 6), (3, 8), (4, 11)]),  # the first start: nothing to do
        (1, [(2, 6), (3, 8), (4, 11)]),  # before the first start
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(tmp_path: Path, start_offset: int, expected: list) -> None:
    cache = new_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start_offset)
    assert pairs(cache) == expected
    assert new_cache(tmp_path).entries() == cache.entries()


def test_truncate_from_start_between_the_first_two_epochs(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert pairs(cache) == [(0, 5), (1, 7), (2, 10)]
    assert file_bytes(cache) == b"0\n3\n0 5\n1 7\n2 10\n"


def test_truncations_that_change_nothing_do_not_write(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (2, 6), (3, 8))
    cache.path.unlink()
    cache.truncate_from_end(9)
    cache.truncate_from_start(6)
    cache.truncate_from_start(3)
    assert not cache.path.exists()


def test_truncations_on_an_empty_cache(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)
    cache.truncate_from_end(7)
    cache.truncate_from_start(7)
    assert cache.entries() == []
    assert not cache.path.exists()


def test_clear_and_flush_writes_an_empty_checkpoint(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.clear_and_flush()
    assert cache.entries() == []
    assert file_bytes(cache) == b"0\n0\n"
    assert new_cache(tmp_path).entries() == []


# -- failure and concurrency -----------------------------------------------------------------------


def test_a_failed_write_leaves_the_cache_unchanged(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, (0, 0))
    (tmp_path / (LEADER_EPOCH_CHECKPOINT + ".tmp")).mkdir()  # the write cannot open its .tmp
    with pytest.raises(OSError):
        cache.assign(1, 10)
    assert pairs(cache) == [(0, 0)]
    assert file_bytes(cache) == b"0\n1\n0 0\n"


def test_concurrent_assigns_keep_file_and_cache_equal(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)

    def leader(epoch_offset: int) -> None:
        for i in range(50):
            cache.assign(epoch_offset + i, (epoch_offset + i) * 10)

    threads = [threading.Thread(target=leader, args=(k * 50,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = cache.entries()
    assert entries == new_cache(tmp_path).entries()
    assert all(a.epoch < b.epoch for a, b in pairwise(entries))
    assert all(a.start_offset < b.start_offset for a, b in pairwise(entries))


def test_an_epoch_that_cannot_grow_names_the_segment(tmp_path: Path) -> None:
    """Issue 11 defect 3: a batch header's leader epoch of 2147483647 (not covered by the CRC)
    reached the cache on recovery; the next election's epoch + 1 then raised a raw ValueError."""
    for base in (0, 4):
        (tmp_path / f"{base:020d}.log").write_bytes(b"")
    cache = new_cache(tmp_path, (3, 0), (MAX_LEADER_EPOCH, 2))
    assert pairs(cache) == [(3, 0), (2147483646, 2)]
    with pytest.raises(LeaderEpochOverflowError) as e:
        cache.assign(2147483647, 5)
    assert str(e.value) == (
        f"TestTopic-5: leader epoch 2147483647 at offset 5 in {tmp_path}/00000000000000000004.log "
        "cannot grow: the next leader epoch would exceed the int32 maximum 2147483647 (the batch "
        "header is corrupt or forged)"
    )
    assert pairs(cache) == [(3, 0), (2147483646, 2)]
    assert pairs(LeaderEpochFileCache(TP, cache.path)) == [(3, 0), (2147483646, 2)]


def test_an_epoch_that_cannot_grow_without_a_segment_names_the_checkpoint(tmp_path: Path) -> None:
    cache = new_cache(tmp_path)
    with pytest.raises(LeaderEpochOverflowError) as e:
        cache.assign(1 << 31, 7)
    assert str(e.value) == (
        f"TestTopic-5: leader epoch 2147483648 at offset 7 in {cache.path} cannot grow: the next "
        "leader epoch would exceed the int32 maximum 2147483647 (the epoch assigned is corrupt "
        "or forged)"
    )


def test_a_checkpoint_holding_an_epoch_that_cannot_grow_is_refused(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n2\n0 0\n2147483647 9\n")
    with pytest.raises(LeaderEpochOverflowError) as e:
        LeaderEpochFileCache(TP, path)
    assert str(e.value) == (
        f"TestTopic-5: leader epoch 2147483647 at offset 9 in {path} cannot grow: the next leader "
        "epoch would exceed the int32 maximum 2147483647 (the checkpoint is corrupt or forged)"
    )
