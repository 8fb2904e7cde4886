"""The one table of the ``kafkalog`` data source's options: name, queries, default and meaning.

The source's option parser takes its option names from here (kafka_source_options.py:
``BATCH_AND_STREAMING``, ``BATCH_ONLY``, ``VIEW_OPTIONS``, ``STREAMING_LIMITS``,
``STREAMING_ONLY``, ``SPARK_CONSUMER_OPTIONS``), the writers' names are checked against it by
tests/datasource/test_option_table.py, and the docs' option reference
(docs/user-guide/options.md) is generated from it by docs/gen_options.py, so that neither the
parser nor the docs can drift from this table. ``KafkaLogDataSource.__doc__`` (``help()``) ends
with :func:`plain_text`.

``kind`` says which parser takes an option and so in which queries it is valid:

- ``read``: batch and streaming reads; ``batch``: batch reads only (a streaming query refuses
  it); ``view``: the latest view, batch reads only; ``streaming-limit``: streaming reads (a
  batch query logs Spark's "... option ignored in batch queries"); ``streaming``: streaming
  reads only (a batch query refuses it); ``spark-consumer``: Spark's consumer options, accepted
  with a warning that they have no effect;
- ``client``: the wire client's settings and security, reads and writes over
  ``kafka.bootstrap.servers``; ``spark-client``: one of Spark's consumer options that sets the
  wire client, reads over ``kafka.bootstrap.servers``;
- ``write``: log-dir and protocol writes; ``wire-write``: writes over the protocol only.

Pure data, no imports beyond the standard library: the source's module imports it when Spark
looks data sources up.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

KINDS = {
    "read": "batch, streaming",
    "batch": "batch",
    "view": "batch",
    "streaming-limit": "streaming",
    "streaming": "streaming",
    "spark-consumer": "batch, streaming",
    "client": "reads, writes",
    "spark-client": "batch, streaming",
    "write": "write, writeStream",
    "wire-write": "write, writeStream",
}


@dataclass(frozen=True)
class OptionRow:
    """One option: its Spark spelling (names ignore case), which parser takes it (``kind``,
    module docstring), its default (``""``: not set), ``origin`` (``Spark``: Spark's Kafka
    connector has it with this meaning; ``kafkalog``: kafkalog's own) and its meaning
    (Markdown)."""

    name: str
    kind: str
    default: str
    origin: str
    meaning: str


@dataclass(frozen=True)
class OptionSection:
    """A titled group of rows, the unit of the generated page."""

    title: str
    intro: str
    rows: tuple[OptionRow, ...]


def _row(name: str, kind: str, default: str, origin: str, meaning: str) -> OptionRow:
    return OptionRow(name, kind, default, origin, " ".join(meaning.split()))


SECTIONS = (
    OptionSection(
        "Where the records come from",
        "Exactly one of the two.",
        (
            _row(
                "path",
                "read",
                "",
                "Spark",
                """The log dir, `load("/data/kafka-logs")` or
                `.option("path", ...)`. The driver and every executor must read it at the same
                path (one machine or a shared file system); an absolute path is safest. Or a
                log dir on object storage, `load("s3://bucket/prefix")` (also `s3a://`,
                `gs://`, `hdfs://`, `file://`: any file system `pyarrow.fs` opens), as
                `kafkalog upload` lays it out: every executor reads its ranges from the store
                with ranged reads, no broker involved (settings: "Object storage" below).""",
            ),
            _row(
                "kafka.bootstrap.servers",
                "client",
                "",
                "Spark",
                """`host1:9092,host2:9092`:
                read a cluster over the Kafka protocol (`kafkalog serve`, Apache Kafka, any
                Kafka-compatible broker), no path. The driver plans with Metadata and
                ListOffsets; each executor fetches its range from the partition's leader, one
                fetch ahead. Over the wire the log's bytes are unknown: `maxBytesPerPartition`
                and `maxBytesPerTrigger` cut nothing (offset limits still apply). With a path
                too: an error.""",
            ),
        ),
    ),
    OptionSection(
        "Object storage",
        """For a `path` on S3 (`s3://`, `s3a://`), or a `remoteLogStorage` there, Hadoop S3A's
        settings as Spark users give
        them; unset ones come from the AWS environment (`AWS_ACCESS_KEY_ID`,
        `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `~/.aws`). Secrets never
        appear in logs, errors or reprs. A request failing with a transient error (refused or
        reset connection, timeout, HTTP 5xx, throttling) is tried 5 times in about 1.5 s; the
        error then names the bucket, the key, the byte range and the offset.""",
        (
            _row(
                "fs.s3a.endpoint",
                "read",
                "",
                "kafkalog",
                """The S3 endpoint, `host:port` or `http(s)://host:port` (MinIO, SeaweedFS,
                 Ceph, ...); default: AWS's for the region.""",
            ),
            _row(
                "remoteLogStorage",
                "read",
                "",
                "kafkalog",
                """Tiered storage (KIP-405): the store the brokers tier to (`s3://bucket/prefix`,
                any URI `pyarrow.fs` opens: the brokers' `rsm.config.location`). With a log dir
                as `path`: a tiered topic's offsets that local retention deleted from the dir
                (from its log start offset to its first local segment) are read from the store,
                the rest from the dir, batch and streaming, with exact byte limits on both;
                without it a query that needs those offsets fails naming them and this option.
                With `kafka.bootstrap.servers`: `broker` (or the URI) makes every executor read
                the tiered part of its range (ListOffsets earliest to earliest-local) straight
                from the store, and only the local tail over the protocol; `broker` asks the
                brokers where the store is (DescribeConfigs: `rsm.config.location`, and their
                endpoint and region unless set here; credentials are the `fs.s3a.*` options or
                the AWS environment, never the brokers').""",
            ),
            _row("fs.s3a.access.key", "read", "", "kafkalog", "The access key id."),
            _row("fs.s3a.secret.key", "read", "", "kafkalog", "The secret access key."),
            _row(
                "fs.s3a.session.token",
                "read",
                "",
                "kafkalog",
                "A session token, with temporary credentials.",
            ),
            _row(
                "fs.s3a.path.style.access",
                "read",
                "",
                "kafkalog",
                """`true`: path-style requests (`endpoint/bucket/key`), which most
                 S3-compatible servers need; `false`: virtual-host style. Unset: path style
                 with an endpoint, else AWS's default.""",
            ),
            _row(
                "fs.s3a.endpoint.region",
                "read",
                "",
                "kafkalog",
                "The region to sign requests for (e.g. `us-east-1`).",
            ),
            _row(
                "fs.s3a.connection.ssl.enabled",
                "read",
                "",
                "kafkalog",
                """`false`: plain HTTP to the endpoint, `true`: HTTPS (the default unless the
                 endpoint says `http://`).""",
            ),
            _row(
                "fs.s3a.connection.establish.timeout",
                "read",
                "5s",
                "kafkalog",
                """How long connecting to the endpoint may take (milliseconds, or with a unit:
                 `500ms`, `2s`); then the try fails (transient).""",
            ),
            _row(
                "fs.s3a.connection.timeout",
                "read",
                "30s",
                "kafkalog",
                """How long a request may receive nothing (a stalled server) before the try
                 fails (transient); milliseconds, or with a unit.""",
            ),
            _row(
                "fs.s3a.connection.request.timeout",
                "read",
                "60s",
                "kafkalog",
                """How long one try of a read may take in all, its whole answer received (a
                 server trickling an answer a few bytes at a time never trips the timeout
                 above); then the try fails (transient). The longest wait of one read is 5
                 times this plus 1.5 s.""",
            ),
        ),
    ),
    OptionSection(
        "Which partitions",
        "Exactly one of the three.",
        (
            _row(
                "assign",
                "read",
                "",
                "Spark",
                """JSON `{"topicA":[0,1],"topicB":[2]}`. A
                partition its topic does not have is left out with a warning (as Spark's Admin
                path filters it); an unknown topic is an error.""",
            ),
            _row(
                "subscribe",
                "read",
                "",
                "Spark",
                """Comma-separated topics `topicA,topicB`;
                a topic that does not exist is an error naming it.""",
            ),
            _row(
                "subscribePattern",
                "read",
                "",
                "Spark",
                """A regex found anywhere in a topic
                name, as Spark 4.x finds it: anchor it (`^events-.*$`) for whole names.
                Internal topics (names starting with `__`) are left out; name them in
                `subscribe` or `assign`. Matched with a time limit per name. May match
                nothing (an empty result).""",
            ),
        ),
    ),
    OptionSection(
        "Where to start and end",
        """Precedence, as in Spark (the lower ones are then ignored): `startingTimestamp` >
        `startingOffsetsByTimestamp` > `startingOffsets`, the same for the ending options.
        Offsets are not contiguous (compaction, transaction markers, aborted records): gaps are
        never an error.""",
        (
            _row(
                "startingOffsets",
                "read",
                "earliest (batch), latest (streaming)",
                "Spark",
                """`earliest`, or per-partition JSON `{"topicA":{"0":23,"1":-2}}` (-2:
                 earliest; every partition read must be named). A batch query refuses
                 `latest` and -1 (it would read nothing). An offset below the log start is data
                 loss (`failOnDataLoss`). kafkalog's own `group:<group id>`: start at a consumer
                 group's committed offsets, from the log dir's `__consumer_offsets` (the
                 group's partition only, Kafka's `abs(hashCode) % partitions`; a log dir copied
                 from Kafka works) or, with `kafka.bootstrap.servers`, from the cluster's group
                 coordinator (OffsetFetch); a commit below the log start or past the latest
                 offset is data loss. `group:` is an error with the timestamp options and as
                 `endingOffsets`. Spark's `kafka.group.id` and `groupIdPrefix` do not set
                 offsets; this does. A restarted streaming query resumes from its checkpoint
                 whatever this says.""",
            ),
            _row(
                "startingTimestamp",
                "read",
                "",
                "Spark",
                """Ms since the epoch, e.g.
                `1700000000000`: every partition starts at the first offset whose timestamp is
                at or after it, found through the time index as Kafka's ListOffsets does.""",
            ),
            _row(
                "startingOffsetsByTimestamp",
                "read",
                "",
                "Spark",
                """The same per partition:
                `{"topicA":{"0":1700000000000}}`.""",
            ),
            _row(
                "startingOffsetsByTimestampStrategy",
                "read",
                "error",
                "Spark",
                """When no
                record is at or after the starting timestamp: `error` fails the query,
                `latest` starts at the latest offset.""",
            ),
            _row(
                "startingOffsetsByGroupFallback",
                "read",
                "latest",
                "kafkalog",
                """With
                `startingOffsets=group:...` only: where a partition the group has no commit for
                starts: `earliest`, `latest` (as a consumer's `auto.offset.reset`) or `none`
                (fail, naming those partitions).""",
            ),
            _row(
                "endingOffsets",
                "batch",
                "latest",
                "Spark",
                """`latest` (the high watermark;
                the last stable offset under read_committed), or per-partition JSON
                `{"topicA":{"0":50,"1":-1}}` (-1: latest), exclusive. `earliest` and -2 are
                refused. Past the latest offset: data loss; before the start: an error.""",
            ),
            _row(
                "endingTimestamp",
                "batch",
                "",
                "Spark",
                """End (exclusive) at the first
                offset whose timestamp is at or after it (ms since the epoch); the latest
                offset when there is none.""",
            ),
            _row(
                "endingOffsetsByTimestamp",
                "batch",
                "",
                "Spark",
                """The same per partition,
                as JSON.""",
            ),
            _row(
                "failOnDataLoss",
                "read",
                "true",
                "Spark",
                """Offsets asked for that are no
                longer in the log (retention, DeleteRecords, also between planning and reading
                or between micro-batches; a deleted topic; a high watermark moving back) or not
                yet available: `true` fails the query naming the partition and offsets;
                `false` logs a warning and reads what is there.""",
            ),
        ),
    ),
    OptionSection(
        "What a row holds",
        "",
        (
            _row(
                "includeHeaders",
                "read",
                "false",
                "Spark",
                """Add the column `headers`
                (`array<struct<key: string, value: binary>>`); null for a record without
                headers, as Spark reads it.""",
            ),
            _row(
                "kafka.isolation.level",
                "read",
                "read_uncommitted",
                "Spark",
                """`read_committed` reads up to the last stable offset and skips the records of
                 aborted transactions.""",
            ),
        ),
    ),
    OptionSection(
        "How a read is cut into tasks",
        "",
        (
            _row(
                "minPartitions",
                "read",
                "",
                "Spark",
                """About at least this many Spark
                partitions: large ranges are cut into equal pieces in proportion to their size
                (Spark's rule; a hint).""",
            ),
            _row(
                "maxRecordsPerPartition",
                "read",
                "",
                "Spark",
                """At most this many offsets
                per Spark partition: larger ranges are cut into equal pieces.""",
            ),
            _row(
                "maxBytesPerPartition",
                "read",
                "",
                "kafkalog",
                """About this many bytes of
                the log per Spark partition (`1048576`, `512k`, `64m`, `1g`): a range is cut at
                batch boundaries found through the offset index, so a skewed partition spreads
                over several tasks. Applied before the two options above. Log dirs only.""",
            ),
            _row(
                "packBytesPerPartition",
                "read",
                "128m",
                "kafkalog",
                """Small ranges are packed
                into one task, as Spark's file sources pack small files (Spark's
                `spark.sql.files.maxPartitionBytes`): the small ranges, largest first, fill a
                task while its bytes (each range's bytes plus `packOpenCostInBytes`) stay within
                this. A range is never cut by it. Over `kafka.bootstrap.servers` a range counts
                1 KiB per offset. With `minPartitions` a task is at most total / minPartitions;
                with `maxRecordsPerPartition` it holds at most that many offsets. `0`: one task
                per range. Whole partitions are packed under `view=latest` too.""",
            ),
            _row(
                "packOpenCostInBytes",
                "read",
                "4m",
                "kafkalog",
                """What opening a range costs
                in bytes (Spark's `spark.sql.files.openCostInBytes`), and the size below which a
                range is packed: a range of real size stays one task, as in Spark's Kafka
                connector. 10,000 ranges of a few records make about 313 tasks with the
                defaults. `0`: no range is small.""",
            ),
            _row(
                "narrowByFilters",
                "batch",
                "false",
                "kafkalog",
                """With
                `spark.sql.python.filterPushdown.enabled=true`, let filters on `topic`,
                `partition`, `offset` and lower bounds on `timestamp` narrow the planned
                ranges. Spark 4.3 plans a Python source's read once per loaded DataFrame and
                reuses that plan for every scan of it, so a self-join, union or later query
                on the same DataFrame would lose rows: turn it on only for a DataFrame loaded
                for one query and scanned once.""",
            ),
        ),
    ),
    OptionSection(
        "Fetch sizes",
        "An executor decodes one fetch at a time, so its memory is bounded by these, whatever "
        "the partition's size.",
        (
            _row(
                "kafka.max.partition.fetch.bytes",
                "read",
                "1048576",
                "Spark",
                """Bytes one
                fetch of a partition returns (a larger batch still comes whole). A task reading
                a log dir fetches at least 8 MiB at a time, decoded in place; over
                `kafka.bootstrap.servers`, 4 MiB at a time unless this option or
                `kafka.fetch.max.bytes` is set.""",
            ),
            _row(
                "kafka.fetch.max.bytes",
                "read",
                "52428800",
                "Spark",
                """Caps one fetch too
                (the smaller of the two applies).""",
            ),
        ),
    ),
    OptionSection(
        "The latest view",
        "A compacted topic as a table (user guide: the latest view). Batch reads only: a "
        "streaming query refuses these options, naming them.",
        (
            _row(
                "view",
                "view",
                "records",
                "kafkalog",
                """`latest`: per topic partition, the
                record with the largest offset of each key in the planned range (value, offset,
                timestamp, headers); no row for a key whose latest record is a tombstone, nor for
                records without a key (counted in one warning a task). A partition is one task
                (`minPartitions`, `maxRecordsPerPartition`, `maxBytesPerPartition` are ignored
                with a warning) and pushed filters never narrow it.""",
            ),
            _row(
                "view.keepTombstones",
                "view",
                "false",
                "kafkalog",
                """`true`: a key whose
                latest record is a tombstone gives a row with a null value (CDC merges).""",
            ),
            _row(
                "view.mapSize",
                "view",
                "64m",
                "kafkalog",
                """Bytes of each task's offset map
                (at least `1k`), 32 a key (the cleaner's 24-byte slot and an 8-byte
                fingerprint), filled to 90%: 64 MiB hold 1.88 M keys. More keys: rounds split
                by hash, two more reads each.""",
            ),
        ),
    ),
    OptionSection(
        "Streaming",
        "",
        (
            _row(
                "maxOffsetsPerTrigger",
                "streaming-limit",
                "",
                "Spark",
                """At most this many
                offsets a micro-batch, shared over the partitions by backlog (each partition with
                a backlog gets at least one).""",
            ),
            _row(
                "minOffsetsPerTrigger",
                "streaming-limit",
                "",
                "Spark",
                """Skip a trigger
                while fewer new offsets are there, unless `maxTriggerDelay` has passed since the
                last batch; the first trigger after a (re)start is never delayed. Above
                `maxOffsetsPerTrigger`: an error (batch queries too). Not applied with
                `availableNow`.""",
            ),
            _row(
                "maxTriggerDelay",
                "streaming-limit",
                "15m",
                "Spark",
                """The longest
                `minOffsetsPerTrigger` delays a batch.""",
            ),
            _row(
                "maxBytesPerTrigger",
                "streaming-limit",
                "",
                "kafkalog",
                """About this many
                bytes of the log a micro-batch (`64m`), whole record batches shared out by
                backlog; a record batch larger than the limit is still read. Log dirs only.""",
            ),
            _row(
                "commitOffsetsToGroup",
                "streaming",
                "",
                "kafkalog",
                """`<group id>`: commit
                the end offsets of completed batches as the group's offsets (offset commit key
                v1, value v3) into the log dir's `__consumer_offsets` (created when missing), or
                over `kafka.bootstrap.servers` through the group coordinator, so Kafka's lag
                tools show the query's lag. A log dir owned by `kafkalog serve` fails the query
                at its start, naming the option and the owner. The checkpoint stays where a
                restarted query resumes.""",
            ),
        ),
    ),
    OptionSection(
        "The wire client",
        """For reads and writes over `kafka.bootstrap.servers`; the Kafka consumer's meanings.
        `kafka.security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `kafka.ssl.*`
        (`truststore.location` or `ca.location`, `keystore.location` or
        `certificate.location` + `key.location`, `key.password`,
        `endpoint.identification.algorithm`) and `kafka.sasl.*` (`mechanism`, `jaas.config`
        with Kafka's Plain or Scram login module, or `username` and `password`) go to the
        client as Spark's connector passes them to its consumer; a misspelt or unsupported one
        fails the query naming it. Refused with Spark's messages: `kafka.auto.offset.reset`,
        `kafka.key.deserializer`, `kafka.value.deserializer`, `kafka.enable.auto.commit`,
        `kafka.interceptor.classes` (reads), `kafka.key.serializer`, `kafka.value.serializer`
        (writes). `kafka.group.id` logs Spark's warning. Any other `kafka.*` option is accepted
        with one warning that it has no effect.""",
        (
            _row(
                "kafka.client.id", "client", "kafkalog", "Spark", "The client id sent to brokers."
            ),
            _row(
                "kafka.request.timeout.ms",
                "client",
                "30000",
                "Spark",
                "How long a request waits for its answer.",
            ),
            _row(
                "kafka.socket.connection.setup.timeout.ms",
                "client",
                "10000",
                "Spark",
                "How long a connection may take to open.",
            ),
            _row(
                "kafka.retry.backoff.ms",
                "client",
                "100",
                "Spark",
                "The pause before a retried request.",
            ),
            _row(
                "kafka.default.api.timeout.ms",
                "client",
                "60000",
                "Spark",
                """How long a read
                follows a leader that moved or died before failing, naming the cluster, broker,
                partition and offset.""",
            ),
            _row(
                "kafkaConsumer.pollTimeoutMs",
                "spark-client",
                "120000",
                "Spark",
                """How long an executor
                asks again for records a fetch did not return: a broker reading offsets of
                tiered storage (KIP-405) answers none when its read of the store does not finish
                within its `remote.fetch.max.wait.ms`, and the fetch is sent again until this
                passes; then the task fails naming the partition and offset. Spark's default is
                `spark.network.timeout`.""",
            ),
        ),
    ),
    OptionSection(
        "Accepted with a warning",
        "Spark's Kafka consumer options that mean nothing here: one warning each, no effect.",
        (
            _row("fetchOffset.numRetries", "spark-consumer", "", "Spark", "No effect."),
            _row("fetchOffset.retryIntervalMs", "spark-consumer", "", "Spark", "No effect."),
            _row(
                "groupIdPrefix",
                "spark-consumer",
                "",
                "Spark",
                """No effect: use
                `startingOffsets=group:` and `commitOffsetsToGroup`.""",
            ),
        ),
    ),
    OptionSection(
        "Writing",
        """`df.write` and `df.writeStream`: a log dir (`path`) or a cluster
        (`kafka.bootstrap.servers`, with the wire client's settings above), exactly one. Any
        other option is refused naming it; a log-dir write takes no `kafka.*` option.""",
        (
            _row(
                "path",
                "write",
                "",
                "Spark",
                """The log dir; the driver and every executor
                must see it at the same path (tasks stage their batches inside it).""",
            ),
            _row(
                "topic",
                "write",
                "",
                "Spark",
                """The topic of every row; overrides the `topic`
                column. Trimmed as Spark trims it (Java's `String.trim`); the column is not.
                A streaming write over the protocol with `transactionalIdPrefix` needs it.""",
            ),
            _row(
                "transactionalIdPrefix",
                "wire-write",
                "",
                "kafkalog",
                """Exactly once for
                read_committed readers: each task produces in a Kafka transaction with
                transactional id `<prefix>-<partition id>`, committed by the driver. Stable
                across restarts of the query, unique among writes running at once, at most 200
                characters. Refused for a log-dir write (exactly once without it).""",
            ),
            _row(
                "kafka.transaction.timeout.ms",
                "wire-write",
                "900000",
                "kafkalog",
                """Bounds a
                task's transaction from its start to the driver's commit; a batch that takes
                longer fails and runs again.""",
            ),
            _row(
                "kafka.acks",
                "wire-write",
                "all",
                "Spark",
                """Only `all` or `-1`: the
                producer is idempotent.""",
            ),
        ),
    ),
)

ROWS = tuple(row for section in SECTIONS for row in section.rows)


def names(*kinds: str) -> tuple[str, ...]:
    """The names of the rows of these kinds, in table order."""
    return tuple(row.name for row in ROWS if row.kind in kinds)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The docs' option reference page (docs/user-guide/options.md), generated."""
    out = [
        "# Option reference",
        "",
        "<!-- Generated from datasource/option_table.py by `python docs/gen_options.py`; "
        "do not edit. -->",
        "",
        "Names ignore case; values are strings. An unknown option, a malformed value or a "
        "contradiction fails the query with a message naming the option and the value. "
        "*Origin* says whether Spark's Kafka connector has the option (`Spark`, same meaning) "
        "or it is kafkalog's own.",
    ]
    for section in SECTIONS:
        out += ["", f"## {section.title}", ""]
        if section.intro:
            out += [" ".join(section.intro.split()), ""]
        out += ["| option | queries | default | origin | meaning |", "|---|---|---|---|---|"]
        for row in section.rows:
            default = f"`{row.default}`" if row.default else ""
            out.append(
                f"| `{row.name}` | {KINDS[row.kind]} | {_cell(default)} | {row.origin} "
                f"| {_cell(row.meaning)} |"
            )
    return "\n".join(out) + "\n"


def plain_text() -> str:
    """The same table as text, for ``help(KafkaLogDataSource)``."""
    out = ["", "    Options (datasource/option_table.py; docs: user-guide/options.md):", ""]
    for section in SECTIONS:
        out.append(f"    {section.title}:")
        for row in section.rows:
            default = f"; default {row.default}" if row.default else ""
            out.append(f"      {row.name} ({KINDS[row.kind]}{default})")
            out.append(
                textwrap.fill(
                    row.meaning.replace("`", ""),
                    96,
                    initial_indent=" " * 10,
                    subsequent_indent=" " * 10,
                )
            )
        out.append("")
    return "\n".join(out)
