"""Isolation levels and the read bound each fetcher gets (reference C)."""

from __future__ import annotations

import pytest

from broker_embedded.storage.fetch_data_info import FetchIsolation, IsolationLevel


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("read_uncommitted", IsolationLevel.READ_UNCOMMITTED),
        ("READ_COMMITTED", IsolationLevel.READ_COMMITTED),
        (" read_committed ", IsolationLevel.READ_COMMITTED),
        (0, IsolationLevel.READ_UNCOMMITTED),
        (1, IsolationLevel.READ_COMMITTED),
        (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_COMMITTED),
    ],
)
def test_parse(text, level):
    assert IsolationLevel.parse(text) is level


def test_parse_rejects_unknown_names_and_numbers():
    with pytest.raises(ValueError, match="unknown isolation level 'serializable'"):
        IsolationLevel.parse("serializable")
    with pytest.raises(ValueError):
        IsolationLevel.parse(2)


@pytest.mark.parametrize(
    ("replica_id", "level", "bound"),
    [
        (0, IsolationLevel.READ_UNCOMMITTED, FetchIsolation.LOG_END),
        (3, IsolationLevel.READ_COMMITTED, FetchIsolation.LOG_END),
        (-1, IsolationLevel.READ_UNCOMMITTED, FetchIsolation.HIGH_WATERMARK),
        (-1, IsolationLevel.READ_COMMITTED, FetchIsolation.TXN_COMMITTED),
    ],
)
def test_followers_read_to_the_log_end_consumers_to_hw_or_lso(replica_id, level, bound):
    assert FetchIsolation.of(replica_id, level) is bound
