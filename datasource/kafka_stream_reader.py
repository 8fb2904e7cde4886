"""The streaming reader of the ``kafkalog`` source: :class:`KafkaStreamReader` (a PySpark
``DataSourceStreamReader`` with admission control and ``SupportsTriggerAvailableNow``).

Offsets: Spark's Kafka source JSON, ``{"topicA": {"0": 42, "1": 7}}``: per partition the next
offset to read (the end of the last batch, exclusive). Always canonical (topics sorted by name,
partitions by number, string keys), because Spark compares offsets by their JSON text: a batch
without new data must return exactly the JSON it was given.

Processes: ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and
``reportLatestOffset`` run in one long-lived Python process beside the driver, for the whole
query; ``read`` runs in executor workers on a pickled copy. So each planning call reads the log
dir's published state again (a new :class:`KafkaOffsetReader`, cheap), and nothing depends on
``commit`` (it lags a batch) or ``stop`` (not always called): Spark's checkpoint is the truth.
The reader keeps in memory only what may be lost with the process: when it last admitted a
batch (``maxTriggerDelay``), whose turn it is under a limit, the target of an availableNow run
and the latest offsets for the progress report.

- ``initialOffset``: ``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp``
  resolved as a batch query resolves them (kafka_offset_reader.py), default ``latest``. Only a
  query without a checkpoint calls it: a restarted query resumes at its checkpoint's offsets,
  whatever the options say (Spark's rule). A specific offset past the latest one is data loss
  (as in Spark: the offsets asked for are not there).
- ``latestOffset(start, limit)``: the latest offset of every subscribed partition (its published
  high watermark, or last stable offset under read_committed), bounded by the admission control
  below unless ``limit`` is ``ReadAllAvailable`` (``Trigger.Once``). A partition not in
  ``start`` (a new partition, or a new topic matching ``subscribePattern``) starts at its
  earliest offset. A partition of ``start`` that no longer exists is left out of the result (the
  planning of that batch reports it). Never returns an offset past the latest one.
- ``partitions(start, end)``: one ``[start, end)`` per partition, cut like a batch read
  (``maxBytesPerPartition``, ``maxRecordsPerPartition``, ``minPartitions``; offset_range.py),
  the pieces packed into tasks as a batch read packs them (``packBytesPerPartition``,
  ``packOpenCostInBytes``; range_packing.py); ``read`` is the batch read's executor path
  (offset_range_reader.py), range after range. Data loss, reported as ``failOnDataLoss`` says
  (:class:`DataLossError` naming the partition and offsets, or a warning and what is there):
  offsets of ``start`` below the log start offset (retention, DeleteRecords), a partition that
  went away (a deleted topic), a new partition whose log no longer starts at 0, an end below the
  start (the high watermark moved back). Offset gaps (compaction, transaction markers, aborted
  records) are never data loss: ranges are offsets, and a range may hold fewer records.

Admission control (``getDefaultReadLimit`` announces the first of ``maxOffsetsPerTrigger``,
``maxBytesPerTrigger``, ``minOffsetsPerTrigger``; the limits given in the options all apply
whenever Spark passes that limit, and none when it passes ``ReadAllAvailable``):

- ``maxOffsetsPerTrigger``: Spark's Kafka source rule (its ``rateLimit``), so that a query
  switching between ``format("kafka")`` and ``format("kafkalog")`` cuts the same batches
  (:func:`rate_limit`): when the partitions' backlogs (latest offset minus the batch's start; a
  new partition from its earliest offset) add up to more than the limit, each partition with a
  backlog takes ``limit * backlog / total`` offsets (a double, as in Spark), rounded down, or up
  when below 1 so that a small partition is never starved. So a batch may take a little fewer
  offsets than the limit (the rounding down), or more when more partitions than the limit have
  a backlog (each takes at least one), exactly as Spark's connector does.
- ``maxBytesPerTrigger`` (kafkalog's own; Spark's ``ReadMaxBytes``): shared out fairly
  (:func:`fair_shares`) over the bytes of the log from each partition's start (whole record
  batches as stored, compressed; offset index positions, :meth:`KafkaOffsetReader.byte_cut`): in
  turn order every partition with a backlog gets its first batch while the budget allows it, the
  rest in proportion (largest remainders get the odd bytes), each share cut at the last batch
  boundary that fits. The partition whose turn it is gets its first batch in any case, so a
  batch larger than the limit is still read (alone, on its turn; the turn moves on by one
  partition with each batch). With ``maxOffsetsPerTrigger`` too, both limits hold.
- ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (default 15m): as Spark's Kafka source, a
  trigger with fewer new offsets than the minimum runs no batch (returns ``start``) unless
  ``maxTriggerDelay`` passed since the last trigger that ran one. The time lives in this process:
  the first trigger of a query run is never delayed and starts the clock, so after a restart
  the delay starts again (as in Spark).

``Trigger.AvailableNow``: ``prepareForTriggerAvailableNow`` records the latest offset of every
subscribed partition; later batches never go past it (partitions appearing later are left for
the next run) and the query stops once it is reached, in batches bounded by the limits above
(``minOffsetsPerTrigger`` is ignored: it would wait for data that the run will not read).

``reportLatestOffset``: the latest offsets seen by the last ``latestOffset`` call, uncapped, so
that a query's progress (``sources[].latestOffset``) shows how far behind it is.

``commitOffsetsToGroup=<group id>``: the query's progress as that consumer group's committed
offsets in the log dir's ``__consumer_offsets`` (group_commit.py) or, with
``kafka.bootstrap.servers``, at the cluster's group coordinator (OffsetCommit, as a consumer
that assigns its partitions itself commits: generation -1, no member id), so that ``kafkalog groups
describe`` and Kafka's lag tools show its lag. When Spark tells a source what is done (checked
in PySpark 4.3): ``commit(end)`` of batch N comes only when batch N+1 is planned (after its
offsets are in the offset log, before it runs), so a query that caught up would never commit its
last batch through ``commit`` alone. But ``latestOffset(start)`` is called at every trigger
with ``start`` the end of the last batch, which Spark has completed (its commit log written)
before it plans the next one; so the reader commits ``start`` there, and ``end`` in ``commit``:
committed offsets are always offsets whose records the query has processed (the first trigger
commits the query's starting offsets: nothing before them is to be read). Only partitions whose
offset changed since the reader's last commit are written (all of them at the first commit of
the process), so idle triggers write nothing. A commit that fails fails the query, naming the
option (e.g. a ``kafkalog serve`` owning the log dir: one writer per log dir; the reader checks
that when it is created). The group's commits are as durable as the checkpoint is behind them:
after a restart Spark replays from its checkpoint, and the group's offsets follow again.

Thread safety: Spark calls one reader from one thread.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from broker_embedded.errors import InvalidTopicError, UnknownTopicOrPartitionError
from broker_embedded.storage.fetch_source import FetchSource, FetchSourceDescriptor
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import KafkaSourceError
from datasource.group_commit import check_can_commit, commit_group_offsets
from datasource.kafka_input_partition import plan_tasks, ranges_of
from datasource.kafka_offset_reader import KafkaOffsetReader, report_data_loss, source_of
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.offset_range import OffsetRange, OffsetRangeCalculator
from datasource.offset_spec import SpecificOffsets
from datasource.worker_heap import call_started

log = logging.getLogger(__name__)

# A partition deleted while being looked at: its files (a log dir) or its topic (over the wire).
_GONE = (FileNotFoundError, UnknownTopicOrPartitionError)
K = TypeVar("K")
T = TypeVar("T")
_ATTEMPTS = 3
Offsets = dict[TopicPartition, int]


# -- offsets JSON ----------------------------------------------------------------------------------


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offsets JSON (as a dict), canonical: topics sorted, partitions by number."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def parse_offsets_json(offset: Mapping[str, object]) -> Offsets:
    """The offsets of Spark's Kafka offsets JSON; anything else (a checkpoint of another source)
    is a :class:`KafkaSourceError` showing it."""
    out: Offsets = {}
    try:
        for topic, parts in offset.items():
            if not isinstance(parts, Mapping):
                raise ValueError(f"topic {topic!r} maps to {parts!r}")
            for partition, value in parts.items():
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"offset {value!r} of {topic}-{partition}")
                out[TopicPartition(topic, int(partition))] = value
    except (AttributeError, TypeError, ValueError, InvalidTopicError) as e:
        raise KafkaSourceError(
            f'offsets {offset!r} are not kafkalog offsets ({{"topic": {{"0": 42}}}}): {e}; '
            "is the checkpoint location another query's?"
        ) from None
    return out


# -- admission control -----------------------------------------------------------------------------


def fair_shares(
    lags: Mapping[K, int],
    budget: int,
    *,
    first: Mapping[K, int] | None = None,
    turn: int = 0,
) -> dict[K, int]:
    """Split ``budget`` over the keys with a positive lag: each gets at most its lag, the total
    is at most ``budget`` (and exactly ``min(budget, sum of lags)`` when ``first`` is not
    given). Everything when it all fits. Otherwise, in the order of ``lags`` rotated by
    ``turn`` (modulo the number of keys with a lag), each key gets its first step (``first[k]``,
    default 1: one offset, or one batch's bytes) while the budget allows it, the first key (whose
    turn it is) in any case, even past the budget; then what is left is shared in proportion to
    the remaining lags, rounded down, the odd units going to the largest remainders (ties in the
    rotated order). Keys that get nothing are left out."""
    keys = [k for k, lag in lags.items() if lag > 0]
    total = sum(lags[k] for k in keys)
    if total <= budget:
        return {k: lags[k] for k in keys}
    r = turn % len(keys)
    keys = keys[r:] + keys[:r]
    steps = {k: (1 if first is None else first[k]) for k in keys}
    chosen, left = [], budget
    for i, k in enumerate(keys):
        if steps[k] <= left or i == 0:  # the key whose turn it is moves even past the budget
            chosen.append(k)
            left = max(left - steps[k], 0)
    rest = {k: lags[k] - steps[k] for k in chosen}
    rest_total = sum(rest.values())
    shares = {k: steps[k] for k in chosen}
    if rest_total and left:
        left = min(left, rest_total)
        extra = {k: left * rest[k] // rest_total for k in chosen}
        odd = left - sum(extra.values())
        by_remainder = sorted(chosen, key=lambda k: -(left * rest[k] % rest_total))
        for k in by_remainder[:odd]:
            extra[k] += 1
        for k in chosen:
            shares[k] += extra[k]
    return shares


def rate_limit(lags: Mapping[K, int], limit: int) -> dict[K, int]:
    """How many offsets each key with a positive lag takes under ``maxOffsetsPerTrigger=limit``,
    by the rule of Spark's Kafka source (``KafkaMicroBatchStream.rateLimit``): all of them when
    the lags add up to at most ``limit``; otherwise ``limit * (lag / total)`` in doubles, rounded
    down, or up when below 1, and never more than the lag."""
    sized = {k: lag for k, lag in lags.items() if lag > 0}
    total = float(sum(sized.values()))
    out = {}
    for k, lag in sized.items():
        prorate = limit * (lag / total)
        out[k] = min(lag, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
    return out


# -- the reader ------------------------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans and reads a streaming query over a log dir; see the module docstring."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._last_trigger_s: float | None = None  # when a trigger last ran a batch
        self._target: Offsets | None = None  # availableNow: never read past these
        self._reported: Offsets | None = None  # latest offsets seen by the last latestOffset
        self._turn = 0  # batches admitted: whose turn it is under a limit
        self._initial_offsets: dict | None = None  # resolved once per query (see initialOffset)
        self._group_committed: Offsets = {}  # commitOffsetsToGroup: what this process committed
        self._group_partition: TopicPartition | None = None  # where the group's commits go
        self._client: Any = None  # over the wire: the query's one KafkaClient (_opened)
        if options.commit_to_group is not None and options.bootstrap_servers is None:
            check_can_commit(options.path, options.commit_to_group)

    def _planning(self, plan: Callable[[KafkaOffsetReader], T]) -> T:
        """``plan`` over a fresh view of the log dir (what the broker published by now). A file
        that disappears under the view (retention deleting a segment between listing and
        opening it) makes it look again, with a new view, a few times."""
        for attempt in range(_ATTEMPTS):
            source = source_of(self.options)
            with KafkaOffsetReader(
                source, self.options.isolation_level, self._opened(source)
            ) as offsets:
                try:
                    return plan(offsets)
                except FileNotFoundError:
                    if attempt + 1 == _ATTEMPTS:
                        raise
            time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _opened(self, source: FetchSourceDescriptor) -> FetchSource | None:
        """Over the wire, a fresh view of the cluster (its own Metadata) through the query's one
        client, connected at the first call and kept across triggers, as Spark's Kafka source
        keeps its admin client (the client reconnects a broken connection itself); a log dir is
        opened by the caller."""
        if self.options.bootstrap_servers is None:
            return None
        from broker_embedded.client.wire_fetch_source import WireFetchSource  # kio: cluster reads

        if self._client is None:
            self._client = source.connect()  # type: ignore[attr-defined]
        return WireFetchSource(source, self._client)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Closes the query's client (Spark does not always call it: the process's end does)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict:
        """What Spark pickles to executors: everything but the driver side's client."""
        return {**self.__dict__, "_client": None}

    # -- offsets -----------------------------------------------------------------------------------

    def initialOffset(self) -> dict:  # noqa: N802 (PySpark's name)
        # Spark asks twice for a new query (before the first latestOffset, then as batch 0's
        # start): both answers must be the same, or "latest" moves on between them.
        if self._initial_offsets is None:
            self._initial_offsets = offsets_json(self._planning(self._initial))
        return self._initial_offsets

    def _initial(self, offsets: KafkaOffsetReader) -> Offsets:
        opts = self.options
        tps = offsets.partitions(opts.subscription)
        starts = offsets.starting_offsets(
            opts.starting,
            tps,
            fail_on_data_loss=opts.fail_on_data_loss,
            strategy=opts.starting_strategy,
        )
        if isinstance(opts.starting, SpecificOffsets):
            for tp in tps:
                latest = offsets.latest(tp)
                if starts[tp] > latest:
                    report_data_loss(
                        f"startingOffsets asks for offset {starts[tp]} of {tp}, past its "
                        f"{_bound_name(opts.read_committed)} {latest}: offsets "
                        f"[{latest}, {starts[tp]}) are not in the log",
                        opts.fail_on_data_loss,
                        f"starting {tp} at offset {latest} instead",
                    )
                    starts[tp] = latest
        return starts

    def _latest(self, offsets: KafkaOffsetReader) -> Offsets:
        """The latest offset of every subscribed partition that exists now (a partition removed
        while being looked at counts as gone)."""
        found: Offsets = {}
        for tp in offsets.partitions(self.options.subscription, missing_ok=True):
            try:
                found[tp] = offsets.latest(tp)
            except _GONE:
                if _exists(offsets, tp):
                    raise  # a segment went away: look again
        return found

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (PySpark's name)
        self._target = self._planning(self._latest)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (PySpark's name)
        opts = self.options
        if opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        if opts.min_offsets_per_trigger is not None:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:  # noqa: N802 (PySpark's name)
        return None if self._reported is None else offsets_json(self._reported)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        starts = parse_offsets_json(start)
        self._commit_to_group(starts)
        ends = self._planning(lambda offsets: self._next_ends(offsets, starts, limit))
        if ends is None:
            return start  # skipped by minOffsetsPerTrigger: exactly what Spark gave
        if ends != starts:
            self._last_trigger_s = time.monotonic()
            self._turn += 1
        return offsets_json(ends)

    def _next_ends(
        self, offsets: KafkaOffsetReader, starts: Offsets, limit: ReadLimit
    ) -> Offsets | None:
        """The end offsets of the next batch; ``None`` to skip this trigger."""
        latest = self._latest(offsets)
        self._reported = latest
        until: Offsets = {}
        for tp, offset in latest.items():
            if self._target is None:
                until[tp] = offset
            elif tp in self._target:
                until[tp] = min(offset, self._target[tp])
            elif tp in starts:
                until[tp] = starts[tp]  # in start but not in the availableNow target: wait
        begins: Offsets = {}  # where the next batch begins, as the log stands now
        for tp in until:
            earliest = offsets.earliest(tp)
            begins[tp] = max(starts.get(tp, earliest), earliest)
        if isinstance(limit, ReadAllAvailable):
            return until
        if self._delayed(limit, starts, until):
            return None
        return self._limited(offsets, limit, (starts, begins, until))

    def _delayed(self, limit: ReadLimit, starts: Offsets, until: Offsets) -> bool:
        """``minOffsetsPerTrigger``: whether to skip this trigger (Spark's ``delayBatch``, which
        counts the new offsets of a partition not in ``starts`` from 0)."""
        opts = self.options
        lo = limit.min_rows if isinstance(limit, ReadMinRows) else opts.min_offsets_per_trigger
        if lo is None or self._target is not None:
            return False
        now = time.monotonic()
        last = self._last_trigger_s
        if last is None or (now - last) * 1000 >= opts.max_trigger_delay_ms:
            self._last_trigger_s = now
            return False
        available = sum(until[tp] - starts.get(tp, 0) for tp in until)
        return available < lo

    def _limited(
        self,
        offsets: KafkaOffsetReader,
        limit: ReadLimit,
        spans: tuple[Offsets, Offsets, Offsets],
    ) -> Offsets:
        """The ends of the next batch under ``maxOffsetsPerTrigger`` and ``maxBytesPerTrigger``
        (an end below its begin, the high watermark moved back, passes through as it is)."""
        opts = self.options
        starts, begins, until = spans
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        max_rows = max_rows or opts.max_offsets_per_trigger
        max_bytes = max_bytes or opts.max_bytes_per_trigger
        tps = sorted(until)
        turn = self._turn
        ends = dict(until)
        if max_rows is not None:
            froms = {tp: starts.get(tp, begins[tp]) for tp in tps}  # Spark's: not raised to
            lags = {tp: until[tp] - froms[tp] for tp in tps}  # the log start (data loss)
            for tp, share in rate_limit(lags, max_rows).items():
                ends[tp] = froms[tp] + share
        if max_bytes is not None:
            sizes, firsts = {}, {}
            for tp in tps:
                if ends[tp] > begins[tp]:
                    sizes[tp] = offsets.log_bytes(tp, begins[tp], ends[tp])
                    _, firsts[tp] = offsets.byte_cut(
                        tp, begins[tp], ends[tp], 0, min_one_batch=True
                    )
            lagging = {tp: n for tp, n in sizes.items() if n > 0}
            shares = fair_shares(lagging, max_bytes, first=firsts, turn=turn)
            if sum(lagging.values()) > max_bytes:
                for tp in lagging:
                    share = shares.get(tp, 0)
                    ends[tp] = (
                        offsets.byte_cut(tp, begins[tp], ends[tp], share, min_one_batch=True)[0]
                        if share
                        else begins[tp]
                    )
        return ends

    # -- planning and reading ----------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        starts, ends = parse_offsets_json(start), parse_offsets_json(end)
        if starts == ends:
            return []
        return self._planning(
            lambda offsets: plan_tasks(offsets, self._ranges(offsets, starts, ends), self.options)
        )

    def _ranges(
        self, offsets: KafkaOffsetReader, starts: Offsets, ends: Offsets
    ) -> list[OffsetRange]:
        """The ranges of a batch from ``starts`` to ``ends``, cut for Spark (not yet packed)."""
        opts = self.options
        fail = opts.fail_on_data_loss
        calculator = OffsetRangeCalculator(
            opts.min_partitions, opts.max_records_per_partition, opts.max_bytes_per_partition
        )
        for tp in sorted(set(starts) - set(ends)):
            report_data_loss(
                f"{tp} is gone (its topic was deleted, or it no longer matches "
                f"{opts.subscription}): the query had read it up to offset {starts[tp]}; "
                f"offsets from {starts[tp]} on that it had not read are lost",
                fail,
                f"no longer reading {tp}",
            )
        ranges = []
        for tp in sorted(ends):
            r = self._range(offsets, tp, starts.get(tp), ends[tp])
            if r is not None:
                ranges.append(r)
        offsets.check_local(ranges)
        return calculator.ranges(ranges, offsets.byte_cuts)

    def _range(
        self, offsets: KafkaOffsetReader, tp: TopicPartition, begin: int | None, end: int
    ) -> OffsetRange | None:
        """The range of ``tp`` in a batch from ``begin`` (``None``: a new partition) to ``end``,
        after the data-loss checks; ``None`` when nothing is left to read."""
        fail = self.options.fail_on_data_loss
        try:
            earliest = offsets.earliest(tp)
        except _GONE:
            if _exists(offsets, tp):
                raise  # a segment went away: look again
            report_data_loss(
                f"{tp} is gone (its topic was deleted): offsets [{begin or 0}, {end}) planned "
                "for this batch are no longer in the log",
                fail,
                f"no longer reading {tp}",
            )
            return None
        if begin is None:  # a new partition: from its earliest offset, which should be 0
            begin = earliest
            if earliest > 0:
                report_data_loss(
                    f"{tp} is a new partition of the query whose log starts at offset "
                    f"{earliest}, not 0: offsets [0, {earliest}) were deleted before the query "
                    "could read them",
                    fail,
                    f"reading {tp} from offset {earliest}",
                )
        elif begin < earliest:
            report_data_loss(
                f"{tp}: the query had read it up to offset {begin}, but its log now starts at "
                f"offset {earliest} (retention or DeleteRecords): offsets [{begin}, {earliest}) "
                "were deleted before they were read",
                fail,
                f"reading {tp} from offset {earliest}",
            )
            begin = earliest
        elif end < begin:
            report_data_loss(
                f"{tp}: its latest offset moved back from {begin} to {end} (the log was "
                f"truncated): offsets the query read in [{end}, {begin}) are no longer there, "
                "and new records may take those offsets",
                fail,
                f"reading {tp} on from offset {end}",
            )
            return None
        if end <= begin:
            return None
        return OffsetRange(tp.topic, tp.partition, begin, end)

    def read(self, partition: InputPartition) -> Iterator:
        call_started()
        from datasource.offset_range_reader import read_offset_range  # numba: executors only

        for part in ranges_of(partition):
            yield from read_offset_range(part)

    def commit(self, end: dict) -> None:
        """With ``commitOffsetsToGroup``, commit ``end`` to the group (module docstring);
        otherwise nothing: Spark's checkpoint holds the offsets."""
        self._commit_to_group(parse_offsets_json(end))

    def _commit_to_group(self, offsets: Offsets) -> None:
        """Commit the offsets that changed since the last commit to ``commitOffsetsToGroup``."""
        group = self.options.commit_to_group
        if group is None:
            return
        changed = {tp: o for tp, o in offsets.items() if self._group_committed.get(tp) != o}
        if not changed:
            return
        if self.options.bootstrap_servers is None:
            self._group_partition = commit_group_offsets(
                self.options.path, group, changed, partition=self._group_partition
            )
        else:
            source = source_of(self.options)
            with self._opened(source) as cluster:  # type: ignore[union-attr]
                cluster.commit_offsets(group, changed)  # type: ignore[attr-defined]
        self._group_committed.update(changed)


def _exists(offsets: KafkaOffsetReader, tp: TopicPartition) -> bool:
    return offsets.source.exists(tp)


def _bound_name(read_committed: bool) -> str:
    return "last stable offset" if read_committed else "high watermark"
