"""The :class:`FetchSource` of a Kafka cluster, read over the wire: :class:`WireFetchSource`.

Opened from :class:`WireSource` (the bootstrap addresses and the client's settings: small,
frozen, picklable, what Spark sends to executors). Every answer comes from one
:class:`~broker_embedded.client.kafka_client.KafkaClient` (one blocking socket per broker, kio's
schemas, the server's too):

- ``topics``: one Metadata request for every topic, at the first call (a snapshot: an executor
  that only fetches never sends it); ``exists`` asks Metadata again for the one topic;
- ``list_offset``: ListOffsets to the partition's leader: earliest (-2) the log start offset
  (earliest-local, -4: the first offset in the leader's local log, KIP-405),
  latest (-1) the high watermark or, with ``isolation_level`` 1 (read_committed), the last
  stable offset; a timestamp the first offset whose record timestamp is >= it, kept only below
  latest (as Kafka's ListOffsets does for a consumer; ``None`` otherwise);
- ``committed_offsets`` / ``commit_offsets``: a consumer group's offsets at the group's
  coordinator (FindCoordinator, then OffsetFetch / OffsetCommit with generation -1 and no
  member id, as a consumer that assigns its own partitions commits), for the data source's
  ``startingOffsets=group:<id>`` and ``commitOffsetsToGroup``; not part of :class:`FetchSource`
  (a log dir keeps them in its ``__consumer_offsets``, read and written by datasource/);
- ``fetch``: one Fetch v4+ of the one partition (min bytes 1, max wait 500 ms: at once when
  there are records from the offset; ``max_bytes`` as both
  the request's and the partition's limit, no fetch session): the response's records bytes go to
  the caller as they came (one copy, out of kio's reader), never a Python object per record;
  KIP-74: the broker sends a first batch larger than ``max_bytes`` whole. The aborted
  transactions of a read_committed fetch come as (producer id, first offset) pairs. An answer
  with no records below the bound, at an offset only in the leader's remote storage (below its
  ListOffsets -4, KIP-405), is a remote read that did not finish within the broker's
  ``remote.fetch.max.wait.ms``, not the end of the data: the fetch is sent again, as Kafka's
  consumer does, for at most ``poll_timeout_ms`` (Spark's ``kafkaConsumer.pollTimeoutMs``); so
  is one answered UNKNOWN_SERVER_ERROR (a broker's remote reads queued to their limit, a store
  failing), which Kafka's consumer also retries;
- byte cuts: ``None`` (the log's bytes are unknown over the wire; the planner falls back to
  offsets).
- ``remote_log_storage``: where the brokers tier segments (DescribeConfigs of each broker,
  ``rsm.config.location``), for a reader that reads the tiered part from the store itself
  (tiered_fetch_source.py). Every broker must name one store, the same location at the same
  endpoint (``rsm.config.fs.s3a.endpoint``): a broker copies the segments of the partitions it
  leads to its own store, so with stores per broker a partition's tiered segments are spread
  over the stores of the brokers that led it (and Kafka's remote log metadata, one for the
  cluster, assumes one store); the error names each broker and its store.

Faults: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or a broken connection refresh the metadata
and retry the same request, from the same offset, against the leader the metadata names now, at
most ``retries`` times, ``retry_backoff_ms`` apart, none starting later than
``retry_timeout_ms`` after the first attempt (the client's ``to_leader``). Then a
:class:`PartitionUnavailableError` names the cluster, the partition, the offset and the last
broker's error. OFFSET_OUT_OF_RANGE is the :class:`OffsetOutOfRangeError` the data source's
reader deals with (failOnDataLoss); UNKNOWN_TOPIC_OR_PARTITION an
:class:`UnknownTopicOrPartitionError`. A response frame larger than ``max_response_bytes`` is
refused (a record batch that large cannot be read).

Pipelining (as Kafka's consumer fetcher does): :meth:`WireFetchSource.prefetch` sends the next
fetch of a range on a background thread while the caller works on the previous one; the next
:meth:`fetch` with the same arguments takes its answer, any other call first waits for it and
drops it (storage/fetch_ahead.py). At most one fetch is in flight or buffered: memory is bounded
by two fetch responses (the one being used and the one arriving), whatever the partition's size.

Thread safety: a source is used by one thread; the client is used by that thread or, while a
prefetch is pending, by the one background thread only (the caller waits for the prefetch to end
before it uses the client itself).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_embedded.client.broker_connection import (
    BrokerAddress,
    BrokerConnectionError,
    ClientConfig,
)
from broker_embedded.client.client_security import ClientSecurity
from broker_embedded.client.kafka_client import LATEST, KafkaClient
from broker_embedded.error_code import LEADER_MOVED, ErrorCode
from broker_embedded.errors import KafkaApiError, KafkaLogError, UnknownTopicOrPartitionError
from broker_embedded.storage.fetch_ahead import FetchAhead
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
)
from broker_embedded.storage.object_store import ENDPOINT
from broker_embedded.storage.topic_partition import TopicPartition

DEFAULT_MAX_RESPONSE_BYTES = 64 << 20
RSM_PREFIX = "rsm.config."  # Kafka's prefix of the remote storage manager's configs


class PartitionUnavailableError(KafkaLogError):
    """A partition whose leader could not be reached (or kept moving) through every retry; the
    message names the cluster, the partition, the offset and the last broker's error."""


def _store_of(settings: Mapping[str, str]) -> tuple[str, str]:
    """A broker's store as ``(location, endpoint)``: the endpoint without its scheme, so that
    ``http://host:port`` and ``host:port`` are one."""
    endpoint = settings.get(ENDPOINT, "").strip().rstrip("/")
    return settings["location"].rstrip("/"), endpoint.partition("://")[2] or endpoint


@dataclass(frozen=True)
class WireSource:
    """Opens a :class:`WireFetchSource` on the cluster at ``bootstrap`` (``host:port,...``);
    the other fields are the client's settings (Kafka's consumer names in ms)."""

    bootstrap: str
    client_id: str = "kafkalog"
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000
    retries: int = 10
    retry_backoff_ms: int = 100
    retry_timeout_ms: int = 60_000
    poll_timeout_ms: int = 120_000  # Spark's kafkaConsumer.pollTimeoutMs (spark.network.timeout)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Kafka's client security properties (security.protocol, ssl.*, sasl.*): client_security.py
    security: tuple[tuple[str, str], ...] = ()

    @property
    def location(self) -> str:
        return f"Kafka cluster {self.bootstrap}"

    def client_config(self) -> ClientConfig:
        return ClientConfig(
            client_id=self.client_id,
            connect_timeout_s=self.connect_timeout_ms / 1000,
            request_timeout_s=self.request_timeout_ms / 1000,
            max_response_bytes=self.max_response_bytes,
            retries=self.retries,
            retry_backoff_s=self.retry_backoff_ms / 1000,
            retry_timeout_s=self.retry_timeout_ms / 1000,
            security=ClientSecurity.from_properties(dict(self.security)),
        )

    @property
    def unplanned(self) -> WireSource:
        return self  # a cluster's tasks are handed nothing but the descriptor

    def connect(self) -> KafkaClient:
        """A client of the cluster, for a caller that keeps one across the sources it opens
        (``WireFetchSource(self, client)``: a streaming query's triggers); the caller closes it."""
        return KafkaClient(self.bootstrap, self.client_config())

    def open(self) -> WireFetchSource:
        return WireFetchSource(self)


def parse_bootstrap(text: str) -> tuple[BrokerAddress, ...]:
    """The addresses of ``host:port,host:port`` (a :class:`WireSource`'s ``bootstrap``);
    ``ValueError`` saying what is wrong."""
    return BrokerAddress.parse_list(text)


_FetchKey = tuple[TopicPartition, int, int, IsolationLevel]


class WireFetchSource:
    """A Kafka cluster as a :class:`FetchSource`; see the module docstring."""

    def __init__(self, descriptor: WireSource, client: KafkaClient | None = None) -> None:
        """A source over ``client`` (borrowed: left open by :meth:`close`) or a new one."""
        self._descriptor = descriptor
        self._owns_client = client is None
        self._client = client or KafkaClient(descriptor.bootstrap, descriptor.client_config())
        self._topics: dict[str, tuple[int, ...]] | None = None
        self._ahead: FetchAhead[_FetchKey, FetchedPartition] = FetchAhead("kafkalog-fetch")

    @property
    def descriptor(self) -> WireSource:
        return self._descriptor

    # -- metadata and offsets ----------------------------------------------------------------------

    def topics(self) -> dict[str, tuple[int, ...]]:
        if self._topics is None:
            self._ahead.settle()
            infos = self._call(self._client.metadata, "Metadata", None, None)
            self._topics = {t.name: tuple(p.partition for p in t.partitions) for t in infos}
        return dict(self._topics)

    def declared_partitions(self, topic: str) -> int | None:
        found = self.topics().get(topic)
        return None if found is None else len(found)

    def exists(self, tp: TopicPartition) -> bool:
        self._ahead.settle()
        try:
            infos = self._call(self._client.metadata, "Metadata", tp, None, [tp.topic])
        except UnknownTopicOrPartitionError:
            return False
        return any(p.partition == tp.partition for t in infos for p in t.partitions)

    def list_offset(
        self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel
    ) -> int | None:
        self._ahead.settle()
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self._list(tp, timestamp, IsolationLevel.READ_UNCOMMITTED)
        latest = self._list(tp, LATEST, isolation)
        if timestamp == LATEST_TIMESTAMP:
            return latest
        found = self._list(tp, timestamp, isolation)
        return found if 0 <= found < latest else None

    def _list(self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel) -> int:
        return self._call(
            self._client.list_offset,
            f"ListOffsets at timestamp {timestamp}",
            tp,
            None,
            tp.topic,
            tp.partition,
            timestamp,
            isolation_level=int(isolation),
        )

    def remote_log_storage(self) -> tuple[str, dict[str, str]]:
        """Where the cluster's brokers tier segments to (KIP-405): ``rsm.config.location`` and
        the store's other settings a broker shows (``rsm.config.<key>``, secrets left out), from
        DescribeConfigs of each broker. Every broker must name the same location; a cluster
        that tiers nowhere is a :class:`KafkaLogError` naming the brokers."""
        self._ahead.settle()
        found: dict[int, dict[str, str]] = {}
        for broker_id in self._client.broker_ids():
            configs = self._client.broker_configs(broker_id)
            found[broker_id] = {
                c.name.removeprefix(RSM_PREFIX): c.value
                for c in configs
                if c.name.startswith(RSM_PREFIX) and c.value
            }
        locations = {b: c.get("location") for b, c in found.items()}
        if not locations or None in locations.values():
            shown = ", ".join(f"broker {b}: {v or 'none'}" for b, v in sorted(locations.items()))
            raise KafkaLogError(
                f"{self._descriptor.location}: the brokers' {RSM_PREFIX}location (DescribeConfigs"
                f") must name one store to read tiered segments from; {shown or 'no brokers'}"
            )
        stores = {b: _store_of(c) for b, c in found.items()}
        if len(set(stores.values())) != 1:
            shown = ", ".join(
                f"broker {b}: {uri}{f' at endpoint {at}' if at else ''}"
                for b, (uri, at) in sorted(stores.items())
            )
            raise KafkaLogError(
                f"{self._descriptor.location}: the brokers tier to different stores "
                f"({RSM_PREFIX}location and {RSM_PREFIX}{ENDPOINT}, DescribeConfigs): {shown}; "
                "each broker copies the segments of the partitions it leads to its own store, "
                "so a partition's tiered segments may be in several: give every broker the same "
                "store, or read one store with remoteLogStorage=<its URI> and its fs.s3a.* "
                "options (a partition whose tiered offsets it does not hold fails naming them)"
            )
        settings = dict(next(iter(found.values())))
        return settings.pop("location"), settings

    # -- a consumer group's committed offsets (the cluster's group coordinator) --------------------

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Every committed offset of ``group_id`` (OffsetFetch; -1, no offset, left out)."""
        self._ahead.settle()
        found = self._call(
            self._client.committed_offsets,
            f"OffsetFetch of group {group_id!r}",
            None,
            None,
            group_id,
        )
        return {TopicPartition(t, p): o for (t, p), o in found.items() if o >= 0}

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` as ``group_id``'s (OffsetCommit, generation -1, no member id)."""
        self._ahead.settle()
        values = {(tp.topic, tp.partition): o for tp, o in offsets.items()}
        self._call(
            self._client.commit_offsets,
            f"OffsetCommit of group {group_id!r}",
            None,
            None,
            group_id,
            values,
        )

    # -- fetching ----------------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        key = (tp, offset, max_bytes, isolation)
        ahead = self._ahead.take(key)
        return self._fetch(key) if ahead is None else ahead.result()

    def prefetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> None:
        """Send the fetch :meth:`fetch` will be called with next, on the background thread
        (replacing a pending one, after it ends); see the module docstring."""
        self._ahead.start((tp, offset, max_bytes, isolation), self._fetch)

    def _fetch(self, key: _FetchKey) -> FetchedPartition:
        try:
            fetched = self._fetch_once(key)
        except KafkaApiError as e:
            if e.code != ErrorCode.unknown_server_error:
                raise
            return self._fetch_again(key, e)
        if fetched.records or not self._in_remote_storage(key, fetched):
            return fetched
        return self._fetch_again(key, None)

    def _in_remote_storage(self, key: _FetchKey, fetched: FetchedPartition) -> bool:
        """Whether an empty answer is at an offset below the bound that only the leader's
        remote storage holds (below its local log start, ListOffsets -4)."""
        tp, offset, _, isolation = key
        if offset >= fetched.bound(isolation):
            return False
        try:
            local_start = self._list(tp, EARLIEST_LOCAL_TIMESTAMP, IsolationLevel.READ_UNCOMMITTED)
        except KafkaApiError:
            return False  # a broker without tiered storage
        return offset < local_start

    def _fetch_again(self, key: _FetchKey, error: KafkaApiError | None) -> FetchedPartition:
        """The fetch again, as Kafka's consumer does, after an answer of no records at an offset
        only in remote storage (the broker's read of its store did not finish within its
        ``remote.fetch.max.wait.ms``: Kafka's DelayedRemoteFetch) or an UNKNOWN_SERVER_ERROR
        (a broker's remote reads queued to their limit, its store failing). Bounded by
        ``poll_timeout_ms``, then a :class:`KafkaLogError` naming the partition, the offset
        and the last answer."""
        tp, offset, _, _ = key
        deadline = time.monotonic() + self._descriptor.poll_timeout_ms / 1000
        while time.monotonic() < deadline:
            time.sleep(self._descriptor.retry_backoff_ms / 1000)
            try:
                fetched = self._fetch_once(key)
            except KafkaApiError as e:
                if e.code != ErrorCode.unknown_server_error:
                    raise
                error = e
                continue
            if fetched.records or not self._in_remote_storage(key, fetched):
                return fetched
            error = None
        last = (
            f"the last answer was {error.name}: {error}"
            if error is not None
            else "the offset is only in the broker's remote storage, and its reads of it did "
            "not finish within the broker's remote.fetch.max.wait.ms"
        )
        raise KafkaLogError(
            f"{self._descriptor.location}: no records for {tp} at offset {offset} in "
            f"{self._descriptor.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs): {last}"
        )

    def _fetch_once(self, key: _FetchKey) -> FetchedPartition:
        tp, offset, max_bytes, isolation = key
        f = self._call(
            self._client.fetch,
            "Fetch",
            tp,
            offset,
            tp.topic,
            tp.partition,
            offset,
            max_bytes,
            int(isolation),
        )
        aborted = None
        if isolation == IsolationLevel.READ_COMMITTED:
            aborted = f.aborted_transactions or ()
        return FetchedPartition(
            tp,
            offset,
            f.records,
            f.high_watermark,
            f.last_stable_offset,
            f.log_start_offset,
            aborted,
        )

    def _call(
        self,
        method: Any,
        what: str,
        tp: TopicPartition | None,
        offset: int | None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """``method(*args, **kwargs)`` on the client (which retries a moved or unreachable
        leader); a retriable error left after its retries becomes a
        :class:`PartitionUnavailableError` naming what was asked. Called with no prefetch
        pending, or by the prefetch itself."""
        try:
            return method(*args, **kwargs)
        except (BrokerConnectionError, KafkaApiError) as e:
            if isinstance(e, KafkaApiError) and e.code not in LEADER_MOVED:
                raise
            config = self._descriptor
            where = "" if tp is None else f" of {tp}"
            at = "" if offset is None else f" at offset {offset}"
            raise PartitionUnavailableError(
                f"{what}{where}{at} from {config.location} failed after at most "
                f"{config.retries} retries within {config.retry_timeout_ms} ms "
                f"(kafka.retry.backoff.ms={config.retry_backoff_ms}): {e}"
            ) from e

    # -- bytes of the log: unknown over the wire ---------------------------------------------------

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut | None:
        return None

    def byte_cuts(
        self, tp: TopicPartition, start: int, end: int, max_bytes: int
    ) -> list[int] | None:
        return None

    def task_source(self, tps: Iterable[TopicPartition]) -> WireSource:
        return self._descriptor

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        self._ahead.close()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> WireFetchSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WireFetchSource({self._descriptor.bootstrap!r})"
