"""Driver-side planning over one log: which partitions a subscription matches, their offset
bounds, offsets by timestamp, data-loss checks, and byte positions for splitting.

Everything comes through one :class:`FetchSource` (broker_embedded/storage/fetch_source.py),
opened from its descriptor (:func:`source_of`: a log dir path, :class:`LogDirSource`, for the
``path`` option; a cluster, ``WireSource``, for ``kafka.bootstrap.servers``):
for a log dir, what the broker publishes in it, read through the read-only view (nothing is
written and no lock is taken):

- partitions: the source's topics (a log dir's ``<topic>-<partition>`` directories); the
  partition count a topic should have (a log dir's ``kafkalog-topics.json``), for messages;
- ``earliest(tp)``: the log start offset (ListOffsets earliest);
- ``latest(tp)``: the high watermark (a log dir's ``replication-offset-checkpoint``; the log end
  offset when the partition has no entry, e.g. a log dir written without a broker) or, for
  read_committed, the last stable offset. No bound is ever past it;
- ``offset_for_timestamp(tp, ts)``: Kafka's ListOffsets by timestamp: the first offset whose
  record timestamp is >= ``ts``; ``None`` when there is none below ``latest(tp)``, as Kafka
  answers a consumer. For a log dir (the view's ``find_offset_by_timestamp``), unlike Kafka's
  ``fetchOffsetByTimestamp``, the search goes on past a segment whose matching records all lie
  below the log start offset.

Resolving the options (Spark's rules): ``-2``/``earliest`` is the log start offset, ``-1``/
``latest`` the latest bound; a requested offset below the log start offset, or an ending offset
past the latest bound, is data loss: a :class:`DataLossError` naming the partition and both
offsets with ``failOnDataLoss=true``, else the offset is moved to the nearest available one with
a logged warning. A specific-offsets or by-timestamp JSON must name exactly the subscribed
partitions (Spark's rule for batch queries). Unknown topics are an
:class:`UnknownTopicOrPartitionError` naming them; an assigned partition its topic does not have
is left out with a warning, as Spark's Kafka source (its default, Admin-based, offset reader)
leaves it out. ``group:<group id>``: the group's committed
offsets (:meth:`committed_offsets`: for a log dir, its ``__consumer_offsets``), resolved by
group_offsets.py's :func:`group_starting_offsets` (fallback for partitions without a commit; a
committed offset below the log start or past the latest offset is data loss, as above).

Bytes of the log (``byte_cut``, ``log_bytes``, ``byte_cuts``): where a range may be cut so that
a piece holds about so many bytes (a log dir: exact, from offset index positions);
``maxBytesPerPartition`` splits with them and a streaming query's ``maxBytesPerTrigger``
(kafka_stream_reader.py) bounds its batches with them. A source that cannot tell bytes (the
wire protocol) answers "unknown"; the planner then falls back to offsets: a range is not split
by bytes, and a partition is not limited by bytes in a trigger (its offsets still are).

Tiered storage (KIP-405): with ``remoteLogStorage`` the source is a ``TieredSource`` (the log dir
or the cluster, and the store: tiered_fetch_source.py) and reads the whole log. A log dir read
without it: a tiered partition's earliest is its checkpointed log start offset, below the dir's
first segment (``LogDirFetchSource.tiered_offsets``), and :meth:`KafkaOffsetReader.check_local`
refuses planned ranges that need the offsets only in the store, naming them and the option
(:class:`OffsetsInRemoteStorageError`), rather than reading from the first local offset.

``partitions(subscription, missing_ok=True)`` lists what exists now without complaining about
what does not: a streaming query's later batches, where a partition that went away is data
loss for the stream reader to report (:func:`report_data_loss`), not an unknown name.

The source's partitions are opened on first use and kept until :meth:`close`; what it shows is a
snapshot taken at construction (a streaming planner makes a new one per call to see newer
data). Not thread-safe: one planner uses it.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from broker_embedded.errors import KafkaLogError, UnknownTopicOrPartitionError
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchSource,
    FetchSourceDescriptor,
)
from broker_embedded.storage.log_dir_fetch_source import (
    TOPIC_CONFIG_FILE,
    LogDirFetchSource,
    LogDirSource,
)
from broker_embedded.storage.object_store import StoreLocation, StoreSettings, is_store_uri
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.tiered_fetch_source import TieredSource
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import (
    DATA_LOSS_HINT,
    DataLossError,
    InvalidOptionError,
    OffsetsInRemoteStorageError,
)
from datasource.group_offsets import group_starting_offsets, read_committed_offsets
from datasource.kafka_source_options import FROM_BROKER
from datasource.offset_range import OffsetRange
from datasource.offset_spec import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    GroupOffsets,
    LatestOffsets,
    OffsetSpec,
    SpecificOffsets,
    SpecificTimestamps,
)
from datasource.subscription import Assign, Subscribe, Subscription

if TYPE_CHECKING:
    from broker_embedded.client.wire_fetch_source import WireSource
    from datasource.kafka_source_options import KafkaSourceOptions

log = logging.getLogger(__name__)
INT64_MAX = (1 << 63) - 1


class KafkaOffsetReader:
    """Offsets of the partitions of one log; see the module docstring."""

    def __init__(
        self,
        source: FetchSourceDescriptor | str | Path,
        isolation_level: IsolationLevel,
        opened: FetchSource | None = None,
    ) -> None:
        """The offsets of ``source``, read through ``opened`` (the caller's, of that descriptor)
        or a source opened here; :meth:`close` closes it either way."""
        self.descriptor = source if not isinstance(source, (str, Path)) else log_dir_source(source)
        self.isolation_level = IsolationLevel.parse(isolation_level)
        self.source: FetchSource = opened or self.descriptor.open()
        self._partitions = self.source.topics()

    @property
    def location(self) -> str:
        """What is read, for messages (``log dir /...``)."""
        return self.descriptor.location

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
            return self._assigned(subscription, missing_ok)
        if isinstance(subscription, Subscribe):
            for topic in subscription.topics:
                if topic not in self._partitions and not missing_ok:
                    raise self._unknown(topic, None, subscription)
            topics = tuple(t for t in subscription.topics if t in self._partitions)
        else:
            topics = tuple(t for t in sorted(self._partitions) if subscription.matches(t))
            if not topics and not missing_ok:
                log.warning("%s matches no topic in %s", subscription, self.location)
        found = []
        for topic in topics:
            found += [TopicPartition(topic, p) for p in self._partitions[topic]]
            if missing_ok:
                continue
            declared = self.source.declared_partitions(topic)
            if declared is not None and len(self._partitions[topic]) < declared:
                log.warning(
                    "topic %s has %d partitions in %s but only %s have a directory in %s",
                    topic,
                    declared,
                    TOPIC_CONFIG_FILE,
                    self._partitions[topic],
                    self.location,
                )
        return sorted(found)

    def _assigned(self, subscription: Assign, missing_ok: bool) -> list[TopicPartition]:
        """The assigned partitions the topics have. As Spark's Kafka source (its Admin path:
        the topics' partitions filtered by the assignment), a partition a topic does not have is
        left out (here with a warning, once per query plan), and a topic that does not exist is
        an error, as is a partition a log dir's topic should have but has no directory for."""
        found = [
            tp
            for tp in subscription.partitions
            if tp.partition in self._partitions.get(tp.topic, ())
        ]
        if missing_ok or len(found) == len(subscription.partitions):
            return found
        for tp in subscription.partitions:
            declared = self.source.declared_partitions(tp.topic)
            if tp.topic not in self._partitions:
                raise self._unknown(tp.topic, None, subscription)
            if tp not in found and declared is not None and tp.partition < declared:
                raise self._unknown(tp.topic, tp.partition, subscription)  # a directory missing
        left_out = sorted(set(subscription.partitions) - set(found))
        log.warning(
            "%s: %s not in %s, left out (as Spark's Kafka source leaves them out); %s",
            subscription,
            ", ".join(map(str, left_out)),
            self.location,
            "; ".join(
                f"topic {t} has the partitions {list(self._partitions[t])}"
                for t in sorted({tp.topic for tp in left_out})
            ),
        )
        return found

    def _unknown(
        self, topic: str, partition: int | None, subscription: Subscription
    ) -> UnknownTopicOrPartitionError:
        what = f"topic {topic}" if partition is None else f"partition {topic}-{partition}"
        declared = self.source.declared_partitions(topic)
        if declared is not None and (partition is None or partition < declared):
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
            f"{subscription}: {what} does not exist in {self.location}: {reason}"
        )

    # -- bounds ------------------------------------------------------------------------------------

    def earliest(self, tp: TopicPartition) -> int:
        """The log start offset (of a log dir's tiered partition, its checkpointed one, below
        the dir's first segment: :meth:`check_local`)."""
        tiered = self._tiered(tp)
        return self._list_offset(tp, EARLIEST_TIMESTAMP) if tiered is None else tiered[0]

    def _tiered(self, tp: TopicPartition) -> tuple[int, int] | None:
        """A log dir read without its store: the offsets of ``tp`` only in remote storage
        (``LogDirFetchSource.tiered_offsets``)."""
        if not isinstance(self.source, LogDirFetchSource):
            return None
        return self.source.tiered_offsets(tp)

    def latest(self, tp: TopicPartition) -> int:
        """The high watermark, or the last stable offset for read_committed."""
        return self._list_offset(tp, LATEST_TIMESTAMP)

    def _list_offset(self, tp: TopicPartition, which: int) -> int:
        found = self.source.list_offset(tp, which, self.isolation_level)
        assert found is not None, f"ListOffsets {which} of {tp} gave no offset"
        return found

    def offset_for_timestamp(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """The first offset in ``[earliest(tp), latest(tp))`` whose record timestamp is >=
        ``timestamp_ms`` (ListOffsets by timestamp; see the module docstring). Of a log dir's
        tiered partition read without its store, a match at the dir's first offset answers the
        log start offset (an earlier match may be in remote storage: :meth:`check_local`)."""
        found = self.source.list_offset(tp, timestamp_ms, self.isolation_level)
        tiered = self._tiered(tp) if found is not None else None
        return tiered[0] if tiered is not None and found <= tiered[1] else found  # type: ignore[operator]

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
        if isinstance(spec, GroupOffsets):
            fail = fail_on_data_loss
            return group_starting_offsets(
                spec,
                self.committed_offsets(spec.group_id),
                tps,
                self.earliest,
                self.latest,
                lambda tp, requested, instead, what: self._data_lost(
                    tp, requested, instead, fail, f"startingOffsets={spec}: {what}"
                ),
            )
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

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The committed offsets of consumer group ``group_id``, read from the source's
        ``__consumer_offsets`` (group_offsets.py; a wire source may answer with OffsetFetch)."""
        return read_committed_offsets(self.source, group_id)

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
                tp,
                requested,
                earliest,
                fail,
                f"{option} asks for offset {requested} of {tp}, below its log start offset "
                f"{earliest}: offsets [{requested}, {earliest}) are no longer in the log",
            )
        if option == "endingOffsets" and requested > latest:
            bound = "last stable offset" if self.read_committed else "high watermark"
            return self._data_lost(
                tp,
                requested,
                latest,
                fail,
                f"{option} asks for offsets of {tp} up to {requested}, past its {bound} "
                f"{latest}: offsets [{latest}, {requested}) are not available",
            )
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
        self.check_local(ranges)
        return ranges

    def check_local(self, ranges: Iterable[OffsetRange]) -> None:
        """A log dir read without its store (no ``remoteLogStorage``): a range that needs
        offsets only in remote storage (``LogDirFetchSource.tiered_offsets``) is an
        :class:`OffsetsInRemoteStorageError` naming them and the option, not rows silently
        left out."""
        for r in ranges:
            tp = r.topic_partition
            tiered = self._tiered(tp) if r.end > r.start else None
            if tiered is not None and r.start < tiered[1]:
                raise OffsetsInRemoteStorageError(
                    f"{tp}: offsets [{r.start}, {min(r.end, tiered[1])}) of the range "
                    f"[{r.start}, {r.end}) the query reads are only in remote storage (topic "
                    f"{tp.topic} tiers, remote.storage.enable=true; local retention deleted them "
                    f"from {self.location}, which holds {tp} from offset {tiered[1]}, and its "
                    f"log starts at {tiered[0]}): set the option remoteLogStorage to the store "
                    "the broker tiers to (its rsm.config.location, e.g. s3://bucket/prefix) to "
                    f"read them, or start {tp} at offset {tiered[1]} or later"
                )

    # -- splitting by bytes ------------------------------------------------------------------------

    def byte_cuts(self, r: OffsetRange, max_bytes: int) -> list[int]:
        """Offsets inside ``r`` where to cut it into pieces of about ``max_bytes`` bytes each
        (``FetchSource.byte_cuts``); none when the source cannot tell bytes."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        cuts = self.source.byte_cuts(r.topic_partition, r.start, r.end, max_bytes)
        return [] if cuts is None else cuts

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
        the log (as stored: compressed batches with their headers), and those bytes
        (``FetchSource.byte_cut``). When the source cannot tell bytes: ``(end, 0)``, the range
        whole, counted as no bytes (so a byte limit does not apply to it)."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        found = self.source.byte_cut(tp, start, end, max_bytes, min_one_batch=min_one_batch)
        return (max(start, end), 0) if found is None else (found.offset, found.size)

    def range_bytes(self, r: OffsetRange) -> int | None:
        """Bytes of the log that ``r`` spans (see :meth:`byte_cut`); ``None`` when the source
        cannot tell bytes."""
        found = self.source.byte_cut(r.topic_partition, r.start, r.end, INT64_MAX)
        return None if found is None else found.size

    def task_source(self, tps: Iterable[TopicPartition]) -> FetchSourceDescriptor:
        """What a task reading ``tps`` opens: for a log dir, a descriptor carrying the
        checkpoint entries of ``tps`` as planned (log_dir_fetch_source.py), so that the task
        reads neither the log dir's listing nor its checkpoint files; otherwise the source's
        descriptor."""
        return self.source.task_source(tps)

    def log_bytes(self, tp: TopicPartition, start: int, end: int) -> int:
        """Bytes of the log that ``[start, end)`` spans (see :meth:`byte_cut`)."""
        return self.byte_cut(tp, start, end, INT64_MAX)[1]

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> KafkaOffsetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaOffsetReader({self.location!r}, {self.isolation_level.name.lower()})"


def source_of(options: KafkaSourceOptions) -> FetchSourceDescriptor:
    """What ``options`` read: the log dir of ``path``, or the cluster of
    ``kafka.bootstrap.servers`` over the wire protocol with the client's ``kafka.*`` settings."""
    if options.bootstrap_servers is None and is_store_uri(options.path):
        return ObjectStoreSource(StoreLocation(options.path, options.store_settings))
    if options.bootstrap_servers is None and options.remote_log_storage is not None:
        store = StoreLocation(options.remote_log_storage, options.store_settings)
        return TieredSource(log_dir_source(options.path), ObjectStoreSource(store))
    if options.bootstrap_servers is None:
        return log_dir_source(options.path)
    from broker_embedded.client.wire_fetch_source import WireSource  # kio: cluster reads only

    wire = WireSource(options.bootstrap_servers, **dict(options.client_settings))  # type: ignore[arg-type]
    if options.remote_log_storage is None:
        return wire
    return TieredSource(wire, ObjectStoreSource(_brokers_store(wire, options)))


def _brokers_store(wire: WireSource, options: KafkaSourceOptions) -> StoreLocation:
    """The store a cluster's brokers tier to: ``remoteLogStorage``'s URI, or with ``broker``
    their ``rsm.config.location`` (DescribeConfigs); the reader's ``fs.s3a.*`` settings, each
    unset one from the brokers' (never their secrets, which they do not show)."""
    uri, settings = options.remote_log_storage, options.store_settings
    if uri != FROM_BROKER:
        return StoreLocation(uri, settings)  # type: ignore[arg-type]
    with wire.open() as cluster:
        try:
            uri, shown = cluster.remote_log_storage()
        except KafkaLogError as e:
            raise InvalidOptionError(f"option remoteLogStorage={FROM_BROKER}: {e}") from None
    return StoreLocation(uri, settings.or_else(StoreSettings.parse(shown)))


def log_dir_source(path: str | Path) -> LogDirSource:
    """The source of the ``path`` option: a log dir, which must be a directory."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise InvalidOptionError(
            f"option path={str(path)!r} is invalid: {directory.absolute()} is not a "
            "directory (give the Kafka log dir to read)"
        )
    return LogDirSource(str(directory.resolve()))


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a planning pass (on again after it, if it was
    on). Planning a log dir of 10,000 partitions allocates a view per partition, all kept to its
    end, and the collector scanned them, with every object of the planning process, over and
    over: half the planning's time. Nothing it plans makes garbage cycles that matter: what
    planning leaves is freed by reference counting, or by the collector once it runs again.
    Process-wide: planning runs in Spark's short-lived planning worker."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def report_data_loss(what: str, fail: bool, instead: str) -> None:
    """Data loss as ``failOnDataLoss`` says: ``fail`` raises a :class:`DataLossError` (``what``
    names the partition and the offsets), otherwise a warning says what happens ``instead``."""
    if fail:
        raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss=false: %s", what, instead)


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
