"""Driver-side planning over one log dir: which partitions a subscription matches, their offset
bounds, offsets by timestamp, data-loss checks, and byte positions for splitting.

Everything comes from what the broker publishes in the log dir (read through the read-only
``LogDir`` view; nothing is written and no lock is taken):

- partitions: the ``<topic>-<partition>`` directories; ``kafkalog-topics.json`` (when present)
  tells which partitions a topic should have, for error messages;
- ``earliest(tp)``: the log start offset (``log-start-offset-checkpoint``, at least the first
  segment's base offset);
- ``latest(tp)``: the high watermark (``replication-offset-checkpoint``; the log end offset when
  the partition has no entry, e.g. a log dir written without a broker) or, for read_committed,
  the last stable offset. No bound is ever past it;
- ``offset_for_timestamp(tp, ts)``: Kafka's ListOffsets by timestamp (the time index, then a
  scan): the first offset whose record timestamp is >= ``ts``; ``None`` when there is none
  below ``latest(tp)``, as Kafka answers a consumer. Unlike Kafka's ``fetchOffsetByTimestamp``
  (and ``PartitionReader.find_offset_by_timestamp``, which follows it) the search goes on past
  a segment whose matching records all lie below the log start offset.

Resolving the options (Spark's rules): ``-2``/``earliest`` is the log start offset, ``-1``/
``latest`` the latest bound; a requested offset below the log start offset, or an ending offset
past the latest bound, is data loss: a :class:`DataLossError` naming the partition and both
offsets with ``failOnDataLoss=true``, else the offset is moved to the nearest available one with
a logged warning. A specific-offsets or by-timestamp JSON must name exactly the subscribed
partitions (Spark's rule for batch queries). Unknown topics or partitions are an
:class:`UnknownTopicOrPartitionError` naming them.

Bytes of the log (``byte_cut``, ``log_bytes``, ``byte_cuts``): where a range may be cut so that
a piece holds about so many bytes, from offset index positions;
``maxBytesPerPartition`` splits with them and a streaming query's ``maxBytesPerTrigger``
(kafka_stream_reader.py) bounds its batches with them.

``partitions(subscription, missing_ok=True)`` lists what exists now without complaining about
what does not: a streaming query's later batches, where a partition that went away is data
loss for the stream reader to report (:func:`report_data_loss`), not an unknown name.

The partition views are opened on first use and kept until :meth:`close`; the view of the log
dir is a snapshot taken at construction (a streaming planner makes a new one per call to see
newer data). Not thread-safe: one planner uses it.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from broker_embedded.errors import UnknownTopicOrPartitionError
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.topic_config_file import TOPIC_CONFIG_FILE, TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import DATA_LOSS_HINT, DataLossError, InvalidOptionError
from datasource.offset_range import OffsetRange
from datasource.offset_spec import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OffsetSpec,
    SpecificOffsets,
    SpecificTimestamps,
)
from datasource.subscription import Assign, Subscribe, Subscription

log = logging.getLogger(__name__)
INT64_MAX = (1 << 63) - 1


class KafkaOffsetReader:
    """Offsets of the partitions of one log dir; see the module docstring."""

    def __init__(self, path: str | Path, isolation_level: IsolationLevel) -> None:
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise InvalidOptionError(
                f"option path={str(path)!r} is invalid: {directory.absolute()} is not a "
                "directory (give the Kafka log dir to read)"
            )
        self.log_dir = LogDir(directory.resolve())
        self.isolation_level = IsolationLevel.parse(isolation_level)
        by_topic: dict[str, list[int]] = {}
        for tp in self.log_dir.partitions():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        self._partitions = {t: tuple(ps) for t, ps in by_topic.items()}
        self._topic_config = TopicConfigFile(self.log_dir.path).read()
        self._readers: dict[TopicPartition, PartitionReader] = {}

    @property
    def path(self) -> str:
        """The log dir, absolute."""
        return str(self.log_dir.path)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == IsolationLevel.READ_COMMITTED

    # -- partitions --------------------------------------------------------------------------------

    def topics(self) -> dict[str, tuple[int, ...]]:
        """Every topic with a partition directory, and its partitions (sorted)."""
        return dict(self._partitions)

    def partitions(
        self, subscription: Subscription, *, missing_ok: bool = False
    ) -> list[TopicPartition]:
        """The partitions ``subscription`` reads, sorted; unknown names are an error, unless
        ``missing_ok`` (a streaming query's later batches: what exists now, without warnings;
        a partition that went away is the caller's business)."""
        if isinstance(subscription, Assign):
            if missing_ok:
                return [
                    tp
                    for tp in subscription.partitions
                    if tp.partition in self._partitions.get(tp.topic, ())
                ]
            for tp in subscription.partitions:
                if tp.partition not in self._partitions.get(tp.topic, ()):
                    raise self._unknown(tp.topic, tp.partition, subscription)
            return list(subscription.partitions)
        if isinstance(subscription, Subscribe):
            for topic in subscription.topics:
                if topic not in self._partitions and not missing_ok:
                    raise self._unknown(topic, None, subscription)
            topics = tuple(t for t in subscription.topics if t in self._partitions)
        else:
            topics = tuple(t for t in sorted(self._partitions) if subscription.matches(t))
            if not topics and not missing_ok:
                log.warning("%s matches no topic in log dir %s", subscription, self.path)
        found = []
        for topic in topics:
            found += [TopicPartition(topic, p) for p in self._partitions[topic]]
            entry = self._topic_config.get(topic)
            if missing_ok:
                continue
            if entry is not None and len(self._partitions[topic]) < entry.partitions:
                log.warning(
                    "topic %s has %d partitions in %s but only %s have a directory in %s",
                    topic, entry.partitions, TOPIC_CONFIG_FILE, self._partitions[topic],
                    self.path,
                )  # fmt: skip
        return sorted(found)

    def _unknown(
        self, topic: str, partition: int | None, subscription: Subscription
    ) -> UnknownTopicOrPartitionError:
        what = f"topic {topic}" if partition is None else f"partition {topic}-{partition}"
        entry = self._topic_config.get(topic)
        if entry is not None and (partition is None or partition < entry.partitions):
            reason = (
                f"{TOPIC_CONFIG_FILE} lists it but it has no partition directory in the log dir "
                "(is the log dir another broker's?)"
            )
        elif topic in self._partitions:
            reason = f"topic {topic} has the partitions {list(self._partitions[topic])} here"
        else:
            names = sorted(self._partitions)
            shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
            reason = f"the topics here are: {shown or '(none)'}"
        return UnknownTopicOrPartitionError(
            f"{subscription}: {what} does not exist in log dir {self.path}: {reason}"
        )

    # -- bounds ------------------------------------------------------------------------------------

    def reader(self, tp: TopicPartition) -> PartitionReader:
        """The read-only view of ``tp`` (opened on first use)."""
        found = self._readers.get(tp)
        if found is None:
            found = self._readers[tp] = self.log_dir.open_partition(tp)
        return found

    def earliest(self, tp: TopicPartition) -> int:
        return self.reader(tp).log_start_offset

    def latest(self, tp: TopicPartition) -> int:
        """The high watermark, or the last stable offset for read_committed."""
        r = self.reader(tp)
        return r.last_stable_offset if self.read_committed else r.high_watermark

    def offset_for_timestamp(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """The first offset in ``[earliest(tp), latest(tp))`` whose record timestamp is >=
        ``timestamp_ms``, found as Kafka's ListOffsets does (the first segment whose largest
        timestamp reaches it, its time index, then a scan), except that a segment whose only
        such records lie below the log start offset does not end the search there."""
        reader = self.reader(tp)
        start, latest = reader.log_start_offset, self.latest(tp)
        bases = reader.base_offsets
        for i, base in enumerate(bases):
            if base >= latest:
                break
            if i + 1 < len(bases) and bases[i + 1] <= start:
                continue  # wholly below the log start offset
            seg = reader.segment(base)
            if seg.largest_timestamp < timestamp_ms:
                continue
            found = seg.find_offset_by_timestamp(timestamp_ms, max(start, base))
            if found is not None:
                return found.offset if found.offset < latest else None
        return None

    # -- resolving options -------------------------------------------------------------------------

    def starting_offsets(
        self,
        spec: OffsetSpec,
        partitions: Iterable[TopicPartition],
        *,
        fail_on_data_loss: bool,
        strategy: str = "error",
        option: str = "startingOffsets",
    ) -> dict[TopicPartition, int]:
        """Where each partition starts. ``strategy`` (``startingOffsetsByTimestampStrategy``):
        ``error`` when a timestamp matches no offset, or ``latest`` to start at the latest."""
        tps = list(partitions)
        _check_covers(spec, tps, "starting")
        out = {}
        for tp in tps:
            if isinstance(spec, (GlobalTimestamp, SpecificTimestamps)):
                ts = _timestamp_of(spec, tp)
                offset = self.offset_for_timestamp(tp, ts)
                if offset is None:
                    if strategy != "latest":
                        raise InvalidOptionError(
                            f"{_spec_option(spec, 'starting')}: no offset of {tp} has a record "
                            f"timestamp >= {ts} below the latest offset {self.latest(tp)} (set "
                            "startingOffsetsByTimestampStrategy=latest to start at the latest "
                            "offset instead)"
                        )
                    offset = self.latest(tp)
                out[tp] = offset
            else:
                out[tp] = self._resolve(spec, tp, option, fail_on_data_loss, EARLIEST)
        return out

    def ending_offsets(
        self,
        spec: OffsetSpec,
        partitions: Iterable[TopicPartition],
        *,
        fail_on_data_loss: bool,
    ) -> dict[TopicPartition, int]:
        """Where each partition ends (exclusive); never past ``latest(tp)``."""
        tps = list(partitions)
        _check_covers(spec, tps, "ending")
        out = {}
        for tp in tps:
            if isinstance(spec, (GlobalTimestamp, SpecificTimestamps)):
                offset = self.offset_for_timestamp(tp, _timestamp_of(spec, tp))
                out[tp] = self.latest(tp) if offset is None else offset
            else:
                out[tp] = self._resolve(spec, tp, "endingOffsets", fail_on_data_loss, LATEST)
        return out

    def _resolve(
        self, spec: OffsetSpec, tp: TopicPartition, option: str, fail: bool, default: int
    ) -> int:
        if isinstance(spec, EarliestOffsets):
            return self.earliest(tp)
        if isinstance(spec, LatestOffsets):
            return self.latest(tp)
        assert isinstance(spec, SpecificOffsets)
        requested = spec.offsets.get(tp, default)
        if requested == EARLIEST:
            return self.earliest(tp)
        if requested == LATEST:
            return self.latest(tp)
        earliest, latest = self.earliest(tp), self.latest(tp)
        if requested < earliest:
            return self._data_lost(
                tp, requested, earliest, fail,
                f"{option} asks for offset {requested} of {tp}, below its log start offset "
                f"{earliest}: offsets [{requested}, {earliest}) are no longer in the log",
            )  # fmt: skip
        if option == "endingOffsets" and requested > latest:
            bound = "last stable offset" if self.read_committed else "high watermark"
            return self._data_lost(
                tp, requested, latest, fail,
                f"{option} asks for offsets of {tp} up to {requested}, past its {bound} "
                f"{latest}: offsets [{latest}, {requested}) are not available",
            )  # fmt: skip
        return requested

    @staticmethod
    def _data_lost(tp: TopicPartition, requested: int, instead: int, fail: bool, what: str) -> int:
        report_data_loss(what, fail, f"using offset {instead} of {tp} instead")
        return instead

    def offset_ranges(
        self,
        starting: OffsetSpec,
        ending: OffsetSpec,
        partitions: Iterable[TopicPartition],
        *,
        fail_on_data_loss: bool,
        strategy: str = "error",
    ) -> list[OffsetRange]:
        """The ``[start, end)`` of each partition of a batch query; an end before its start is
        an :class:`InvalidOptionError` naming the partition and both offsets."""
        tps = list(partitions)
        starts = self.starting_offsets(
            starting, tps, fail_on_data_loss=fail_on_data_loss, strategy=strategy
        )
        ends = self.ending_offsets(ending, tps, fail_on_data_loss=fail_on_data_loss)
        ranges = []
        for tp in tps:
            start, end = starts[tp], ends[tp]
            if end < start:
                bound = "last stable offset" if self.read_committed else "high watermark"
                raise InvalidOptionError(
                    f"{tp}: the ending offset {end} ({_spec_option(ending, 'ending')}={ending}) "
                    f"is before the starting offset {start} "
                    f"({_spec_option(starting, 'starting')}={starting}); the partition holds "
                    f"offsets [{self.earliest(tp)}, {self.latest(tp)}) (log start, {bound})"
                )
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
        return ranges

    # -- splitting by bytes ------------------------------------------------------------------------

    def byte_cuts(self, r: OffsetRange, max_bytes: int) -> list[int]:
        """Offsets inside ``r`` where to cut it into pieces of about ``max_bytes`` bytes each.

        Candidate cuts are segment starts and, from each offset index entry (the last offset
        ``o`` of the batch starting at byte ``p``), the offset ``o + 1`` at about ``p``: the
        batch after it. A cut is made at the first candidate past each multiple of
        ``max_bytes`` from the range's start. The positions come from the sparse index, so the
        pieces are about ``max_bytes`` (give or take ``index.interval.bytes`` and one batch).
        """
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        reader = self.reader(r.topic_partition)
        bases = reader.base_offsets
        offsets: list[np.ndarray] = []
        positions: list[np.ndarray] = []
        start_position = None
        consumed = 0  # bytes of the segments before the current one (from the range's first)
        for i, base in enumerate(bases):
            following = bases[i + 1] if i + 1 < len(bases) else None
            if following is not None and following <= r.start:
                continue
            if base >= r.end:
                break
            seg = reader.segment(base)
            index = seg.offset_index
            if start_position is None:
                start_position = index.lookup(r.start).position if r.start > base else 0
            offsets += [np.array([base], np.int64), index.offsets().astype(np.int64) + 1]
            positions += [np.array([consumed], np.int64),
                          index.positions().astype(np.int64) + consumed]  # fmt: skip
            consumed += seg.size_in_bytes
        if not offsets:
            return []
        cand = np.concatenate(offsets)
        pos = np.concatenate(positions)
        keep = np.ones(len(cand), bool)
        keep[1:] = cand[1:] > np.maximum.accumulate(cand)[:-1]  # strictly increasing only
        keep &= (cand > r.start) & (cand < r.end)
        cand, pos = cand[keep], pos[keep]
        bucket = (pos - (start_position or 0)) // max_bytes
        rises = np.flatnonzero(np.diff(np.concatenate([[0], bucket])) > 0)
        return [int(c) for c in cand[rises]]

    # -- bytes of the log --------------------------------------------------------------------------

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> tuple[int, int]:
        """``(cut, size)``: the furthest batch boundary ``cut`` in ``[start, end]`` such that the
        batches from the one holding ``start`` up to ``cut`` take at most ``max_bytes`` bytes of
        the log (as stored: compressed batches with their headers), and those bytes. ``end``
        itself when everything fits; ``start`` when not even the batch holding ``start`` fits,
        unless ``min_one_batch``, which takes that batch whatever its size.

        Bytes count whole batches, from the one holding ``start`` to the one before the batch
        holding ``end`` (so an ``end`` inside a batch does not count that batch). Positions
        come from the offset index of each segment the range spans, the cut from a walk of at
        most about ``index.interval.bytes`` of batches after an index entry: exact, and cheap
        (no record is decoded)."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        if end <= start:
            return start, 0
        reader = self.reader(tp)
        bases = reader.base_offsets
        cut, used = start, 0
        for base in bases[max(bisect.bisect_right(bases, start) - 1, 0) :]:
            if base >= end:
                break
            seg = reader.segment(base)
            lo = seg.position_of(start) if start > base else 0
            hi = seg.position_of(end)
            if hi <= lo:
                continue
            if used + hi - lo <= max_bytes:
                used += hi - lo
                cut = min(end, seg.next_offset)
                continue
            found = _last_boundary(seg, lo, hi, lo + max_bytes - used)
            if found is None and min_one_batch and cut == start:
                first = next(seg.batches(lo, hi))
                found = (first.last_offset + 1, lo + first.size_in_bytes)
            if found is not None:
                cut, used = min(end, found[0]), used + found[1] - lo
            break
        return cut, used

    def log_bytes(self, tp: TopicPartition, start: int, end: int) -> int:
        """Bytes of the log that ``[start, end)`` spans (see :meth:`byte_cut`)."""
        return self.byte_cut(tp, start, end, INT64_MAX)[1]

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        readers, self._readers = self._readers, {}
        for r in readers.values():
            r.close()

    def __enter__(self) -> KafkaOffsetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaOffsetReader({self.path!r}, {self.isolation_level.name.lower()})"


def report_data_loss(what: str, fail: bool, instead: str) -> None:
    """Data loss as ``failOnDataLoss`` says: ``fail`` raises a :class:`DataLossError` (``what``
    names the partition and the offsets), otherwise a warning says what happens ``instead``."""
    if fail:
        raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss=false: %s", what, instead)


def _last_boundary(seg, lo: int, hi: int, target: int) -> tuple[int, int] | None:
    """``(offset, position)`` of the last batch boundary of ``seg`` in ``(lo, min(hi, target)]``
    (the offset after the batch ending there, its end position), ``None`` when the batch at
    ``lo`` already ends past ``target``. The offset index gives the last entry at or before
    ``target``; the walk from there reads at most about ``index.interval.bytes`` of batches."""
    positions = seg.offset_index.positions()
    slot = int(np.searchsorted(positions, target, side="right")) - 1
    begin = max(lo, int(positions[slot])) if slot >= 0 else lo
    found = None
    for b in seg.batches(begin, hi):
        ends = b.position + b.size_in_bytes
        if ends > target:
            if found is None and b.position > lo:
                found = (b.base_offset, b.position)  # the batch before it ends where it starts
            break
        found = (b.last_offset + 1, ends)
    return found


def _check_covers(spec: OffsetSpec, partitions: list[TopicPartition], prefix: str) -> None:
    """Spark's rule: per-partition JSON names exactly the partitions the query reads."""
    if isinstance(spec, SpecificOffsets):
        named: Mapping[TopicPartition, int] = spec.offsets
    elif isinstance(spec, SpecificTimestamps):
        named = spec.timestamps
    else:
        return
    wanted = set(partitions)
    missing, extra = sorted(wanted - set(named)), sorted(set(named) - wanted)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"it does not name {', '.join(map(str, missing))}")
        if extra:
            parts.append(f"it names {', '.join(map(str, extra))}, which the query does not read")
        raise InvalidOptionError(
            f"option {_spec_option(spec, prefix)}={spec} must name every partition the query "
            f"reads ({', '.join(map(str, sorted(wanted))) or 'none'}); use -2 for earliest and "
            f"-1 for latest: {'; '.join(parts)}"
        )


def _timestamp_of(spec: GlobalTimestamp | SpecificTimestamps, tp: TopicPartition) -> int:
    return spec.timestamp_ms if isinstance(spec, GlobalTimestamp) else spec.timestamps[tp]


def _spec_option(spec: OffsetSpec, prefix: str) -> str:
    """The option a resolved spec came from, for messages."""
    if isinstance(spec, GlobalTimestamp):
        return f"{prefix}Timestamp"
    if isinstance(spec, SpecificTimestamps):
        return f"{prefix}OffsetsByTimestamp"
    return f"{prefix}Offsets"
