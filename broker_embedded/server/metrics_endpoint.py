"""The Prometheus endpoint of ``kafkalog serve --metrics-port`` (``prometheus-client``), with
Kafka's metric names as the common JMX exporter rules map them (``kafka.server<type=
BrokerTopicMetrics, name=MessagesInPerSec, topic=t><>Count`` becomes
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``: ``kafka_<domain>_<type>_<name>``
lowercased, ``PerSec`` meters as ``_total`` counters, histograms as quantile gauges with a
``_count``).

Every value is read when Prometheus scrapes (a custom collector): the hot paths only add to the
counters and histograms of ``BrokerTopicStats`` (replica_manager/broker_topic_stats.py) and
``RequestMetrics`` (request_metrics.py). The metrics, by family (docs/operating/index.md):

- ``kafka_server_brokertopicmetrics_{messagesin,bytesin,bytesout,totalproducerequests,
  failedproducerequests,totalfetchrequests,failedfetchrequests}_total`` and tiered storage's
  ``..._{remotecopybytes,remotecopyrequests,remotecopyerrors,remotefetchbytes,
  remotefetchrequests,remotefetcherrors,remotedeleterequests,remotedeleteerrors,
  buildremotelogauxstaterequests,buildremotelogauxstateerrors}_total``: one sample per topic
  (``topic`` label) and one without a label for all topics, as Kafka's MBeans;
  ``kafka_server_brokertopicmetrics_remotelogsizebytes``: the bytes in the store of the tiered
  partitions this broker leads, per topic and for all (Kafka's ``RemoteLogSizeBytes``, from the
  remote log manager's cached manifests); ``..._{remotecopylagbytes,remotecopylagsegments}``:
  their closed segments not copied yet, now.
- ``kafka_network_requestmetrics_requests_total{request,version}`` and, per API, the summaries
  ``kafka_network_requestmetrics_{requestqueuetimems,localtimems,remotetimems,
  responsequeuetimems,responsesendtimems,totaltimems}{request,quantile}`` with ``_count`` and
  ``_sum`` (ms): quantiles 0.50 .. 0.999 as Kafka's histogram MBeans, interpolated in fixed
  buckets counted since the server started (use ``rate(_sum) / rate(_count)`` for recent means).
- ``kafka_network_requestchannel_{requestqueuesize,responsequeuesize}``;
  ``kafka_server_delayedoperationpurgatory_{purgatorysize,numdelayedoperations}
  {delayedOperation="Produce"|"Fetch"}``.
- ``kafka_network_socketserver_networkprocessoravgidlepercent`` and
  ``kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent``: the fraction (0..1, as
  Kafka's) of the threads' time spent waiting for work since the previous scrape (since the
  server started at the first).
- ``kafka_server_replicamanager_{partitioncount,leadercount,underreplicatedpartitions}``,
  ``kafka_server_replicamanager_{isrshrinks,isrexpands}_total``,
  ``kafka_controller_kafkacontroller_offlinepartitionscount`` (partitions without a leader,
  cluster-wide: with several brokers each reports the same count, where Kafka's active
  controller alone does).
- ``kafka_log_log_{size,numlogsegments,logstartoffset,logendoffset}{topic,partition}`` for each
  partition this broker holds.
- ``kafka_log_logflushstats_logflushrateandtimems{quantile}`` with ``_count`` and ``_sum``:
  every log flush (fsync) of the process (Kafka's is JVM-wide too).
- ``kafka_log_logcleanermanager_max_dirty_percent`` (0..100),
  ``kafka_log_logcleaner_time_since_last_run_ms``; kafkalog's own
  ``kafkalog_logcleaner_{bytesread,byteswritten}_total`` (Kafka only logs them).
- ``kafka_server_fetchsessioncache_{numincrementalfetchsessions,
  numincrementalfetchpartitionscached}``, ``..._incrementalfetchsessionevictions_total``.
- kafkalog's own ``kafkalog_authentication_{failures,refusals,lockouts}_total`` and
  ``kafkalog_authentication_locked`` (principals and addresses locked out now): the
  failed-authentication limits (security/authentication_limiter.py; Kafka has none).
- ``kafka_consumergroup_{current_offset,lag}{consumergroup,topic,partition}`` (kafka_exporter's
  names: Kafka has no broker metric for lag) for each committed partition this broker leads: lag
  = the partition's high watermark (what a consumer can read up to) - the committed offset.

Registry: each :class:`MetricsEndpoint` has its own ``CollectorRegistry`` (no process-wide
default registry), so several servers in one process expose each their own metrics.
Limits: the per-topic and per-partition families have one sample per topic / partition held
(BrokerTopicStats caps its topic rows); the HTTP server is prometheus-client's (a thread per
scrape, bounded by the scrapers). A scrape that fails inside a family (a broker stopped
meanwhile) answers without that family and logs one line.

Thread safety: the collector reads under the locks of what it reads; two concurrent scrapes
share the idle-ratio state under the collector's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from broker_embedded.broker import Broker
from broker_embedded.latency_histogram import BUCKETS, MS, QUANTILES, quantile
from broker_embedded.replica_manager.broker_topic_stats import FIELDS, BrokerTopicStats
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers.groups import coordinator_of
from broker_embedded.server.protocol import api_name
from broker_embedded.server.request_metrics import STAGES, merged
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import FLUSH_TIMES

log = logging.getLogger(__name__)

# BrokerTopicStats fields as Kafka's meter names
TOPIC_METERS = {
    "messages_in": "messagesin",
    "bytes_in": "bytesin",
    "bytes_out": "bytesout",
    "total_produce": "totalproducerequests",
    "failed_produce": "failedproducerequests",
    "total_fetch": "totalfetchrequests",
    "failed_fetch": "failedfetchrequests",
    "remote_copy_bytes": "remotecopybytes",
    "remote_copy_requests": "remotecopyrequests",
    "remote_copy_errors": "remotecopyerrors",
    "remote_fetch_bytes": "remotefetchbytes",
    "remote_fetch_requests": "remotefetchrequests",
    "remote_fetch_errors": "remotefetcherrors",
    "remote_delete_requests": "remotedeleterequests",
    "remote_delete_errors": "remotedeleteerrors",
    "build_remote_log_aux_state_requests": "buildremotelogauxstaterequests",
    "build_remote_log_aux_state_errors": "buildremotelogauxstateerrors",
}


def _gauge(name: str, doc: str, value: float) -> Metric:
    m = Metric(name, doc, "gauge")
    m.add_sample(name, {}, value)
    return m


def _by_topic(meter: str, doc: str, by_topic: dict[str, int]) -> Metric:
    """A BrokerTopicMetrics gauge: one sample per topic and one without a label (all)."""
    name = f"kafka_server_brokertopicmetrics_{meter}"
    m = Metric(name, doc, "gauge")
    m.add_sample(name, {}, sum(by_topic.values()))
    for topic, value in sorted(by_topic.items()):
        m.add_sample(name, {"topic": topic}, value)
    return m


def _counter(name: str, doc: str, value: float) -> Metric:
    m = Metric(name, doc, "counter")
    m.add_sample(name + "_total", {}, value)
    return m


@dataclass
class _IdleReading:
    at_ns: int
    idle_ns: int


class KafkaCollector(Collector):
    """The metrics of one broker behind its server (module docstring). ``server`` and
    ``broker`` are read at each scrape (a restarted broker is a new object); a scrape while
    the server is stopped answers nothing."""

    def __init__(
        self, server: Callable[[], BrokerServer | None], broker: Callable[[], Broker]
    ) -> None:
        self._server = server
        self._broker = broker
        self._lock = threading.Lock()
        self._idle: dict[str, _IdleReading] = {}

    def collect(self) -> Iterator[Metric]:
        server, broker = self._server(), self._broker()
        if server is None or broker.is_closed:
            return
        for part in (
            self._topics,
            self._remote,
            self._requests,
            self._queues,
            self._idle_ratios,
            self._replicas,
            self._logs,
            self._flushes,
            self._cleaner,
            self._fetch_sessions,
            self._authentication,
            self._groups,
        ):
            try:
                yield from part(server, broker)
            except Exception as e:  # a broker stopping meanwhile: answer the rest
                log.warning("metrics: %s skipped: %r", part.__name__, e)

    # -- counters of the hot paths -------------------------------------------------------------

    def _topics(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        stats = broker.replica_manager.topic_stats
        if stats is None:
            return
        all_topics, by_topic = stats.snapshot()
        for i, field in enumerate(FIELDS):
            meter = TOPIC_METERS[field]
            name = f"kafka_server_brokertopicmetrics_{meter}"
            m = Metric(name, f"Kafka's BrokerTopicMetrics {meter} (Count)", "counter")
            m.add_sample(name + "_total", {}, all_topics[i])
            for topic, counts in sorted(by_topic.items()):
                m.add_sample(name + "_total", {"topic": topic}, counts[i])
            yield m
        yield _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks", stats.isr_shrinks)
        yield _counter("kafka_server_replicamanager_isrexpands", "ISR expands", stats.isr_expands)

    def _remote(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        rlm = broker.remote_log_manager
        if rlm is None:
            return
        by_topic: dict[str, int] = {}
        for tp, size in rlm.remote_log_size_bytes().items():
            by_topic[tp.topic] = by_topic.get(tp.topic, 0) + size
        yield _by_topic(
            "remotelogsizebytes", "bytes in remote storage of the partitions led", by_topic
        )
        lag_bytes: dict[str, int] = {}
        lag_segments: dict[str, int] = {}
        for tp, (size, count) in rlm.remote_copy_lag().items():
            lag_bytes[tp.topic] = lag_bytes.get(tp.topic, 0) + size
            lag_segments[tp.topic] = lag_segments.get(tp.topic, 0) + count
        yield _by_topic("remotecopylagbytes", "bytes of closed segments not copied yet", lag_bytes)
        yield _by_topic("remotecopylagsegments", "closed segments not copied yet", lag_segments)

    def _requests(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        metrics = [p.metrics for p in server.socket_server.processors if p.metrics is not None]
        if not metrics:
            return
        apis = merged(metrics)
        names = {key: api_name(key) for key in apis}
        name = "kafka_network_requestmetrics_requests"
        requests = Metric(name, "requests by API and version (Kafka's RequestsPerSec)", "counter")
        for key, api in sorted(apis.items()):
            for version, count in enumerate(api.versions):
                if count:
                    labels = {"request": names[key], "version": str(version)}
                    requests.add_sample(name + "_total", labels, count)
        yield requests
        for stage_index, stage in enumerate(STAGES):
            name = f"kafka_network_requestmetrics_{stage.lower()}"
            m = Metric(name, f"Kafka's RequestMetrics {stage} by API", "summary")
            for key, api in sorted(apis.items()):
                labels = {"request": names[key]}
                offset = stage_index * BUCKETS
                for label, q in QUANTILES:
                    value = quantile(api.buckets, offset, q)
                    m.add_sample(name, {**labels, "quantile": label}, value)
                m.add_sample(name + "_count", labels, api.count)
                m.add_sample(name + "_sum", labels, api.sums[stage_index] / MS)
            yield m

    # -- gauges read now -----------------------------------------------------------------------

    def _queues(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        channel = server.socket_server.request_channel
        yield _gauge(
            "kafka_network_requestchannel_requestqueuesize",
            "requests queued",
            channel.queued_requests(),
        )
        yield _gauge(
            "kafka_network_requestchannel_responsequeuesize",
            "responses queued",
            channel.queued_responses(),
        )
        rm = broker.replica_manager
        for name, attr in (("purgatorysize", "watched_total"), ("numdelayedoperations", "pending")):
            full = f"kafka_server_delayedoperationpurgatory_{name}"
            m = Metric(full, f"Kafka's DelayedOperationPurgatory {name}", "gauge")
            for op, purgatory in (("Produce", rm.produce_purgatory), ("Fetch", rm.fetch_purgatory)):
                m.add_sample(full, {"delayedOperation": op}, getattr(purgatory, attr))
            yield m

    def _idle_ratios(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        processors = server.socket_server.processors
        handlers = server.handlers.threads
        now = time.monotonic_ns()
        for name, clocks in (
            (
                "kafka_network_socketserver_networkprocessoravgidlepercent",
                [p.idle for p in processors],
            ),
            (
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                [h.idle for h in handlers],
            ),
        ):
            idle = sum(c.idle_ns for c in clocks)
            with self._lock:
                last = self._idle.get(name) or _IdleReading(server.started_ns, 0)
                self._idle[name] = _IdleReading(now, idle)
            span = (now - last.at_ns) * max(1, len(clocks))
            ratio = (idle - last.idle_ns) / span if span > 0 else 1.0
            yield _gauge(
                name, "fraction of the threads' time waiting for work", min(1.0, max(0.0, ratio))
            )

    def _replicas(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        partitions = list(broker.replica_manager.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        under = 0
        for p in leaders:
            state = p.state
            if state is not None and len(state.isr) < len(state.replicas):
                under += 1
        yield _gauge(
            "kafka_server_replicamanager_partitioncount", "partitions held", len(partitions)
        )
        yield _gauge("kafka_server_replicamanager_leadercount", "partitions led", len(leaders))
        yield _gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "led partitions whose ISR is smaller than their replicas",
            under,
        )
        offline = sum(1 for t in broker.controller.metadata() for p in t.partitions if p.leader < 0)
        yield _gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "partitions without a leader",
            offline,
        )

    def _logs(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        families = {
            key: Metric(f"kafka_log_log_{key}", f"Kafka's Log {key} per partition", "gauge")
            for key in ("size", "numlogsegments", "logstartoffset", "logendoffset")
        }
        for tp, p in sorted(broker.replica_manager.partitions.items()):
            lg = p.log
            if lg.is_closed:
                continue
            labels = {"topic": tp.topic, "partition": str(tp.partition)}
            values = {
                "size": lg.size_in_bytes,
                "numlogsegments": len(lg.segment_base_offsets),
                "logstartoffset": lg.log_start_offset,
                "logendoffset": lg.log_end_offset,
            }
            for key, value in values.items():
                families[key].add_sample(f"kafka_log_log_{key}", labels, value)
        yield from families.values()

    def _flushes(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        buckets, sum_ns = FLUSH_TIMES.snapshot()
        name = "kafka_log_logflushstats_logflushrateandtimems"
        m = Metric(name, "log flush times (process-wide, as Kafka's LogFlushStats)", "summary")
        for label, q in QUANTILES:
            m.add_sample(name, {"quantile": label}, quantile(buckets, 0, q))
        m.add_sample(name + "_count", {}, sum(buckets))
        m.add_sample(name + "_sum", {}, sum_ns / MS)
        yield m

    def _cleaner(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        cleaner = broker.log_manager.cleaner
        if cleaner is None:
            return
        ratio = cleaner.manager.dirtiest_log_cleanable_ratio
        yield _gauge(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "dirty ratio of the dirtiest compacted log (percent)",
            int(100 * ratio),
        )
        last = cleaner.last_run_ms
        since = 0 if last < 0 else max(0, broker.clock_ms() - last)
        yield _gauge(
            "kafka_log_logcleaner_time_since_last_run_ms",
            "ms since the cleaner's last pass ended (0 before the first)",
            since,
        )
        yield _counter(
            "kafkalog_logcleaner_bytesread", "bytes read by cleaning rounds", cleaner.bytes_read
        )
        yield _counter(
            "kafkalog_logcleaner_byteswritten",
            "bytes written by cleaning rounds",
            cleaner.bytes_written,
        )

    def _fetch_sessions(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        cache = server.apis.fetch_sessions
        if cache is None:
            return
        prefix = "kafka_server_fetchsessioncache_"
        yield _gauge(prefix + "numincrementalfetchsessions", "fetch sessions cached", cache.size)
        yield _gauge(
            prefix + "numincrementalfetchpartitionscached",
            "partitions in the cached fetch sessions",
            cache.total_partitions,
        )
        yield _counter(
            prefix + "incrementalfetchsessionevictions", "fetch sessions evicted", cache.evictions
        )

    def _authentication(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        limiter = next((a.security.limiter for a in server.socket_server.acceptors), None)
        if limiter is None:
            return
        counts = limiter.counts()
        prefix = "kafkalog_authentication_"
        yield _counter(prefix + "failures", "failed SASL authentications", counts.failures)
        yield _counter(prefix + "refusals", "authentications refused by a lockout", counts.refusals)
        yield _counter(prefix + "lockouts", "principals or addresses locked out", counts.lockouts)
        yield _gauge(prefix + "locked", "principals and addresses locked out now", counts.locked)

    def _groups(self, server: BrokerServer, broker: Broker) -> Iterator[Metric]:
        coordinator = coordinator_of(broker.controller)
        if coordinator is None:
            return
        offset = Metric("kafka_consumergroup_current_offset", "committed offset", "gauge")
        lag = Metric("kafka_consumergroup_lag", "high watermark - committed offset", "gauge")
        partitions = broker.replica_manager.partitions
        for overview in coordinator.list_groups():
            group = overview.group_id
            committed = coordinator.fetch_offsets(group, None)
            for (topic, index), value in sorted(committed.items()):
                p = partitions.get(TopicPartition(topic, index))
                if p is None or not p.is_leader or isinstance(value, Exception):
                    continue
                labels = {"consumergroup": group, "topic": topic, "partition": str(index)}
                offset.add_sample(offset.name, labels, value.offset)
                lag.add_sample(lag.name, labels, max(0, p.log.high_watermark - value.offset))
        yield offset
        yield lag


class MetricsEndpoint:
    """An HTTP server answering ``GET /metrics`` with its own registry's collectors."""

    def __init__(self, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port = self._httpd.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def register(self, collector: Collector) -> None:
        self.registry.register(collector)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def enable_topic_stats(broker: Broker) -> None:
    """Start counting ``broker``'s topic metrics (once; kept across servers)."""
    if broker.replica_manager.topic_stats is None:
        broker.replica_manager.topic_stats = BrokerTopicStats()
