"""The ``.txnindex`` file: entry layout, append rules, searches for fetches, truncation, checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import IndexCorruptError, InvalidOffsetError
from broker_embedded.storage.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
)

# Four aborted transactions; their ranges overlap as concurrent producers' would.
TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def index(tmp_path: Path):
    with TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0) as idx:
        yield idx


def filled(index: TransactionIndex) -> TransactionIndex:
    for txn in TXNS:
        index.append(txn)
    return index


def test_entry_layout_known_bytes() -> None:
    txn = AbortedTxn(1000, 42, 45, 46)
    raw = txn.to_bytes()
    assert len(raw) == ENTRY_SIZE == 34
    assert raw == bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # producer id 1000
        "000000000000002a"  # first offset 42
        "000000000000002d"  # last offset 45
        "000000000000002e"  # last stable offset 46
    )
    assert AbortedTxn.from_bytes(raw) == txn
    assert txn.as_fetch_entry() == (1000, 42)


def test_missing_file_reads_empty_and_is_not_created(index: TransactionIndex) -> None:
    assert index.all_aborted_txns() == []
    assert index.is_empty() and index.last_offset is None
    assert index.collect_aborted(0, 100) == TxnIndexSearchResult((), False)
    index.truncate_to(0)
    index.sanity_check()
    assert not index.path.exists()


def test_append_writes_whole_entries_visible_to_another_instance(index: TransactionIndex) -> None:
    filled(index)
    assert index.path.stat().st_size == 4 * ENTRY_SIZE
    assert index.path.read_bytes() == b"".join(t.to_bytes() for t in TXNS)
    other = TransactionIndex(index.path, 0)
    assert other.all_aborted_txns() == TXNS
    assert other.last_offset == 50
    index.append(AbortedTxn(4, 51, 60, 61))  # appended after `other` opened: still seen
    assert other.all_aborted_txns()[-1] == AbortedTxn(4, 51, 60, 61)
    index.flush()


@pytest.mark.parametrize("last", [50, 49])
def test_last_offset_must_increase(index: TransactionIndex, last: int) -> None:
    filled(index)
    with pytest.raises(InvalidOffsetError, match=f"{last} .*producer 9.* current last offset 50"):
        index.append(AbortedTxn(9, 45, last, 60))
    assert len(index.all_aborted_txns()) == 4


def test_reopened_index_keeps_the_append_rule(index: TransactionIndex) -> None:
    filled(index).close()
    with TransactionIndex(index.path, 0) as reopened:
        with pytest.raises(InvalidOffsetError, match="50"):
            reopened.append(AbortedTxn(9, 45, 50, 60))
        reopened.append(AbortedTxn(9, 45, 51, 60))
        assert reopened.last_offset == 51


def test_append_rejects_impossible_entries(tmp_path: Path) -> None:
    with TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100) as idx:
        with pytest.raises(InvalidOffsetError, match="below the segment's start offset 100"):
            idx.append(AbortedTxn(1, 90, 99, 100))
        with pytest.raises(InvalidOffsetError, match="first offset exceeds last offset"):
            idx.append(AbortedTxn(1, 120, 110, 121))
        with pytest.raises(InvalidOffsetError, match="version"):
            idx.append(AbortedTxn(1, 100, 110, 121, version=1))
        idx.append(AbortedTxn(1, 90, 110, 111))  # the first offset may lie in an older segment
        assert idx.all_aborted_txns() == [AbortedTxn(1, 90, 110, 111)]


@pytest.mark.parametrize(
    ("fetch", "upper", "expected", "complete"),
    [
        (0, 32, TXNS[:3], True),  # TXNS[3] starts at the bound; its LSO 40 >= 32 stops the scan
        (0, 60, TXNS, False),  # no LSO reaches 60: later segments may hold more
        (11, 18, [TXNS[1]], True),  # TXNS[0] ended before 11; TXNS[2] starts at 18
        (20, 30, [TXNS[2]], True),
        (36, 45, [TXNS[3]], False),
        (51, 70, [], False),
    ],
)
def test_collect_aborted(index, fetch: int, upper: int, expected, complete: bool) -> None:
    filled(index)
    result = index.collect_aborted(fetch, upper)
    assert list(result.aborted_txns) == expected
    assert result.is_complete is complete
    assert result.fetch_entries == [(t.producer_id, t.first_offset) for t in expected]


def test_truncate_to(index: TransactionIndex) -> None:
    filled(index)
    index.truncate_to(51)
    assert index.all_aborted_txns() == TXNS
    index.truncate_to(35)  # drops the entry ending at 35 and everything after it
    assert index.all_aborted_txns() == TXNS[:2]
    assert index.last_offset == 15
    assert index.path.stat().st_size == 2 * ENTRY_SIZE
    index.append(AbortedTxn(7, 16, 20, 21))  # appends continue after the new last offset
    assert index.all_aborted_txns() == [*TXNS[:2], AbortedTxn(7, 16, 20, 21)]
    index.truncate_to(0)
    assert index.all_aborted_txns() == [] and index.last_offset is None
    index.append(AbortedTxn(8, 0, 1, 2))
    assert index.last_offset == 1


def test_reset_delete_rename(index: TransactionIndex, tmp_path: Path) -> None:
    filled(index)
    index.reset()
    assert index.path.exists() and index.path.stat().st_size == 0
    index.append(AbortedTxn(1, 0, 3, 4))
    target = tmp_path / "00000000000000000000.txnindex.deleted"
    index.rename_to(target)
    assert index.path == target and target.exists()
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 3, 4)]
    index.append(AbortedTxn(1, 5, 6, 7))
    assert TransactionIndex(target, 0).last_offset == 6
    assert index.delete() is True
    assert not target.exists() and index.delete() is False


def test_partial_tail_is_ignored_by_reads_but_not_by_checks(index: TransactionIndex) -> None:
    index.path.write_bytes(b"".join(t.to_bytes() for t in TXNS[:2]) + b"\x00" * 10)
    assert index.all_aborted_txns() == TXNS[:2]
    with pytest.raises(IndexCorruptError, match="not a multiple of the 34-byte"):
        index.sanity_check()
    with pytest.raises(IndexCorruptError, match="partial entry"):
        index.append(TXNS[2])


def test_sanity_check_rejects_offsets_below_start_and_disorder(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000020.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 10, 11).to_bytes())
    with pytest.raises(IndexCorruptError, match="below the segment's start offset 20"):
        TransactionIndex(path, 20).sanity_check()
    TransactionIndex(path, 10).sanity_check()
    path.write_bytes(AbortedTxn(1, 20, 30, 31).to_bytes() + AbortedTxn(2, 21, 25, 31).to_bytes())
    with pytest.raises(IndexCorruptError, match="byte 34 .* 25 does not exceed .* 30"):
        TransactionIndex(path, 20).sanity_check()


def test_unknown_version_is_corrupt(index: TransactionIndex) -> None:
    index.path.write_bytes(TXNS[0].to_bytes() + AbortedTxn(1, 5, 15, 16, version=1).to_bytes())
    with pytest.raises(IndexCorruptError, match="byte 34 .* version 1"):
        index.all_aborted_txns()


@st.composite
def txn_lists(draw):
    n = draw(st.integers(0, 25))
    lasts = sorted(draw(st.lists(st.integers(0, 500), min_size=n, max_size=n, unique=True)))
    txns = []
    for i, last in enumerate(lasts):
        first = draw(st.integers(max(0, last - 60), last))
        lso = draw(st.integers(first, last + 30))
        txns.append(AbortedTxn(i, first, last, lso))
    return txns


@settings(max_examples=60, deadline=None)
@given(txn_lists(), st.integers(0, 520), st.integers(0, 80))
def test_property_round_trip_and_search(tmp_path_factory, txns, fetch: int, width: int) -> None:
    path = tmp_path_factory.mktemp("txn") / "00000000000000000000.txnindex"
    with TransactionIndex(path, 0) as idx:
        for txn in txns:
            idx.append(txn)
        assert TransactionIndex(path, 0).all_aborted_txns() == txns
        upper = fetch + width
        expected, complete = [], False
        for txn in txns:
            if txn.last_offset >= fetch and txn.first_offset < upper:
                expected.append(txn)
            if txn.last_stable_offset >= upper:
                complete = True
                break
        assert idx.collect_aborted(fetch, upper) == TxnIndexSearchResult(tuple(expected), complete)
