"""The broker's open segments of one log (:class:`OpenSegments`): how a
``LocalLog`` (local_log.py) reaches the segments of a writable log, the active one shared with
the segment writer. Thread safety: used under the owning log's lock only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from broker_embedded.storage.local_log import Walked
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.transaction_index import TxnIndexSearchResult

T = TypeVar("T")
B = TypeVar("B")


class OpenSegments:
    """The broker's :class:`~broker_embedded.storage.local_log.SegmentAccess`: the segments of
    the writer's listing, opened on first use and kept until the log drops them (retention,
    truncation, a swap), the active one the writer's own segment open for appending (its reads
    see every append through the indexes being appended to). Each segment owns its
    ``.txnindex``, which the log appends to in whichever segment holds an abort marker.
    Nothing is ever stale under the log's lock, so every operation runs once. Used under the
    log's lock only."""

    __slots__ = ("directory", "config", "_writer", "_views")

    recovery_point = 0  # the broker truncated any torn tail when it opened the log

    def __init__(
        self, directory: Path, config: LogConfig, writer: Callable[[], SegmentWriter]
    ) -> None:
        self.directory = directory
        self.config = config
        self._writer = writer
        self._views: dict[int, LogSegment] = {}

    def listing(self) -> LogSegments:
        return LogSegments(self._writer().segment_base_offsets)

    def attempt(self, op: Callable[[LogSegments], T], offset: int | None, what: str) -> T:
        return op(self.listing())

    def resume(
        self, start: int, what: str, walk: Callable[[LogSegments, int, Walked], Iterator[B]]
    ) -> Iterator[B]:
        return walk(self.listing(), start, _nothing)

    def check_in_place(self, seg: LogSegment) -> None:
        pass  # segments change only under the log's lock

    def segment(self, base: int) -> LogSegment:
        active = self._writer().active_segment
        if base == active.base_offset:
            return active  # open for appending: its reads see every append
        view = self._views.get(base)
        if view is None:
            view = LogSegment.open(
                self.directory, base, index_interval_bytes=self.config.index_interval_bytes
            )
            self._views[base] = view
        return view

    def drop(self, base: int, *, abandon: bool = False) -> None:
        """Close the view of closed segment ``base`` (``abandon``: without fsync, as a crash)."""
        view = self._views.pop(base, None)
        if view is not None:
            view.abandon() if abandon else view.close()

    def drop_all(self, *, abandon: bool = False) -> None:
        for base in list(self._views):
            self.drop(base, abandon=abandon)

    def flush_views(self) -> None:
        """fsync the ``.txnindex`` files appended to in closed segments."""
        for view in self._views.values():
            view.flush()

    def collect_aborted(
        self, seg: LogSegment, fetch_offset: int, upper: int
    ) -> TxnIndexSearchResult:
        return seg.collect_aborted(fetch_offset, upper)


def _nothing(seg: LogSegment) -> None:
    """A walk's progress, of no use where nothing goes stale."""
