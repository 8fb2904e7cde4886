"""The ``kafkalog`` command line.

Subcommands:
  topics create NAME [--partitions N] [--replication-factor R] [--config k=v ...]
  topics list | topics describe [NAME] [--json] | topics delete NAME
                                                 manage topics (like kafka-topics)
  produce --topic T [--partition P] [--key-separator SEP] [--header k=v ...] [--acks 0|1|all]
          [--compression none|gzip|snappy|lz4|zstd] [--batch-size N]
                                                 stdin lines to records (like
                                                 kafka-console-producer)
  consume --topic T [--partition P] [--from-beginning | --offset N | --timestamp MS]
          [--max-messages N] [--isolation-level read_committed|read_uncommitted]
          [--format text|json] [--property print.key=true ...]
                                                 print records up to the high watermark, from the
                                                 log dir or a broker (like kafka-console-consumer)
  serve --log-dir DIR [--listeners PLAINTEXT://127.0.0.1:9092] [--brokers N]
                                                 the broker on Kafka's wire protocol until
                                                 SIGTERM/SIGINT (like kafka-server-start); needs
                                                 Python 3.11+ (kio)
  users add --user U (--password PW | --password-stdin) [--mechanism M] [--iterations N]
  users delete --user U [--mechanism M] | users list      (all with --log-dir DIR)
                                                 SASL/SCRAM users of kafkalog serve, stored
                                                 salted in DIR (like kafka-configs --entity-type
                                                 users)
  acls add|list|remove [--topic T | --group G | --transactional-id T | --cluster ...]
       [--allow-principal P | --deny-principal P ...] [--operation OP ...]
       [--allow-host H | --deny-host H ...] [--resource-pattern-type literal|prefixed|any|match]
       --log-dir DIR | --bootstrap-server H:P       the authorizer's ACLs (like kafka-acls)
  groups list | groups describe [--group G ...] --log-dir DIR | --bootstrap-server H:P
                                                 groups of every protocol type, committed
                                                 offsets, log end offsets and lag from
                                                 __consumer_offsets (like kafka-groups --list,
                                                 kafka-consumer-groups --describe)
  upload --log-dir DIR --to s3://BUCKET/PREFIX [--conf fs.s3a.endpoint=URL ...] [--replace]
         [--verify] [--create-bucket]
                                                 copy the closed segments, indexes and
                                                 checkpoints to object storage, where Spark reads
                                                 them from every executor; resumable, verified
                                                 (spark_kafkalog/upload_command.py)
  dump PATH... [--records] [--json] [--summary] [--verify]
                                                 print and verify segments (like kafka-dump-log)
  compact [--config FILE] [--dry-run] [--report FILE]
                                                 compact the log dirs of a compaction config
                                                 (conf/compaction.toml) in this process, like
                                                 spark-submit jobs/compact.py without Spark;
                                                 --report writes its summary as JSON
  demo [--dir DIR] [--events N]                  the main job: an embedded broker produces, Spark
                                                 reads, aggregates, compacts a topic, writes a
                                                 topic and reads it back, streams a copy

topics, produce, consume and serve take --log-dir DIR and --broker-config FILE, the broker's
TOML config (default: the built-in values, which conf/broker.toml holds). Instead of --log-dir,
topics, produce and consume take --bootstrap-server HOST:PORT[,...] (as Kafka's tools do): then
they talk to a running broker (`kafkalog serve`, or Kafka) over the wire protocol and print the
same (spark_kafkalog/bootstrap_server.py; needs Python 3.11+ with kio); exactly one of the two. In
`topics create`, --config k=v sets a topic config (Kafka's meaning). topics and produce open an
embedded broker, which takes the log dir's .lock: while another process owns the dir (a running
`kafkalog serve` among them) they fail, naming it. consume reads the log dir directly and works
while a broker owns it. serve creates the log dir and owns it until it stops
(spark_kafkalog/serve_command.py).

Exit status: 0 success, 1 a reported error (corruption, bad path, unknown topic, offset out of
range, bad config, locked log dir), 2 bad usage, 3 an unexpected error (a bug in kafkalog). Errors
go to stderr as one line naming what is wrong (the file, topic, partition, offset as they apply),
without a traceback; an unexpected error's line names the command and the exception, and
``kafkalog --debug ...`` shows its traceback instead. ``kafkalog compact`` has the compaction
job's statuses (spark_kafkalog/compaction_job.py): 3 is work left, 4 an unexpected error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from broker_embedded.errors import KafkaLogError
from spark_kafkalog import cli_logging, compaction_report

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="with --bootstrap-server: Kafka's client properties (security.protocol, ssl.*, "
        "sasl.mechanism, sasl.jaas.config), as Kafka's tools take them",
    )


def _broker_options(*, bootstrap: bool) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    if bootstrap:
        common.add_argument("--log-dir", type=Path, metavar="DIR", help="the Kafka log dir")
        common.add_argument(
            "--bootstrap-server",
            metavar="HOST:PORT[,...]",
            help="a running broker (kafkalog serve, or Kafka) instead of --log-dir",
        )
        _add_command_config(common)
    else:
        common.add_argument(
            "--log-dir", type=Path, required=True, metavar="DIR", help="the Kafka log dir"
        )
    common.add_argument(
        "--broker-config",
        type=Path,
        metavar="FILE",
        help="broker config (TOML; default: the built-in values of conf/broker.toml)",
    )
    return common


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive(text: str) -> int:
    value = _nonnegative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _add_topics(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser(
        "topics", help="create, list, describe and delete topics (like kafka-topics)"
    )
    actions = topics.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name", help="topic name")
    create.add_argument("--partitions", type=_positive, default=1, help="default 1")
    create.add_argument(
        "--replication-factor", type=_positive, default=1, help="default 1 (one broker)"
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="k=v",
        help="a topic config override (Kafka's names, e.g. retention.ms=86400000), repeatable",
    )

    actions.add_parser("list", parents=[common], help="list the topics")

    describe = actions.add_parser(
        "describe",
        parents=[common],
        help="partitions, leader, replicas, ISR, leader epoch, offsets, config overrides",
    )
    describe.add_argument("name", nargs="?", help="topic name (default: every topic)")
    describe.add_argument("--json", action="store_true", help="one JSON object a topic")

    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("name", help="topic name")


def _add_produce(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    produce = sub.add_parser(
        "produce",
        parents=[common],
        help="produce stdin's lines as records (like kafka-console-producer)",
        description="One record a line of stdin (UTF-8, trailing newline stripped). Without "
        "--partition, keyed records go to murmur2(key) % partitions as with Kafka's default "
        "partitioner, keyless ones round-robin over the partitions. A summary goes to stderr.",
    )
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=_nonnegative, help="every record to this partition")
    produce.add_argument(
        "--key-separator",
        metavar="SEP",
        help="key = the text before the first SEP, value = the rest (a line without SEP is an "
        "error); without it records have no key",
    )
    produce.add_argument(
        "--header", action="append", default=[], metavar="k=v", help="a header of every record"
    )
    produce.add_argument(
        "--acks", choices=("0", "1", "-1", "all"), default="all", help="default all"
    )
    produce.add_argument("--compression", choices=CODECS, default="none")
    produce.add_argument(
        "--batch-size", type=_positive, default=200, help="records per record batch (default 200)"
    )


def _add_consume(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    consume = sub.add_parser(
        "consume",
        parents=[common],
        help="print records up to the high watermark (like kafka-console-consumer)",
        description="Reads the log dir directly (no broker, no lock): works while a broker owns "
        "it and on a log dir copied from Kafka. Stops at the high watermark (read_uncommitted) "
        "or the last stable offset (read_committed); never waits. Starts at the log start "
        "offset unless told otherwise.",
    )
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=_nonnegative, help="default: every partition")
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="from the log start offset (the default)"
    )
    start.add_argument(
        "--offset", metavar="N", help="an offset, earliest or latest (needs --partition)"
    )
    start.add_argument(
        "--timestamp",
        type=_nonnegative,
        metavar="MS",
        help="from the first record with timestamp >= MS (ms since the epoch)",
    )
    consume.add_argument("--max-messages", type=_nonnegative, metavar="N")
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    consume.add_argument("--format", choices=("text", "json"), default="text")
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="k=v",
        help="text format: print.key, print.value, print.timestamp, print.partition, "
        "print.offset, print.headers (true/false), key.separator, line.separator, "
        "headers.separator, null.literal",
    )


def _add_serve(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="the broker on Kafka's wire protocol (like kafka-server-start)",
        description="Opens (creating) the log dir and serves Kafka's protocol until SIGTERM or "
        "SIGINT, then shuts down gracefully and exits 0. Prints one line per listener: "
        "'broker ID listening on PLAINTEXT://HOST:PORT'. With --brokers N > 1, an in-process "
        "cluster: DIR/broker-<i> is broker i's log dir, broker i listens on port + i (port 0: "
        "the OS picks each), and stdin takes 'stop ID', 'kill ID' and 'start ID'.",
    )
    serve.add_argument(
        "--listeners",
        default="PLAINTEXT://127.0.0.1:9092",
        metavar="NAME://HOST:PORT[,...]",
        help="where broker 0 listens (default PLAINTEXT://127.0.0.1:9092; port 0: any free "
        "port); NAME is PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or a name of the [security] "
        "listener.security.protocol.map of --broker-config",
    )
    serve.add_argument(
        "--brokers", type=_positive, default=1, help="brokers in this process (default 1)"
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics (Kafka's names) on http://HOST:PORT/metrics, broker i on "
        "PORT + i (0: any free port; default: no metrics)",
    )
    serve.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the metrics endpoint's address (default 127.0.0.1)",
    )


def _add_users(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser(
        "users", help="SASL/SCRAM users of kafkalog serve (like kafka-configs --entity-type users)"
    )
    actions = users.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-dir", type=Path, metavar="DIR", required=True, help="the log dir")
    who = argparse.ArgumentParser(add_help=False)
    who.add_argument("--user", required=True, metavar="U")
    who.add_argument(
        "--mechanism",
        action="append",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        help="repeatable; default both",
    )
    add = actions.add_parser("add", parents=[common, who], help="add or replace a user")
    secret = add.add_mutually_exclusive_group(required=True)
    secret.add_argument("--password", metavar="PW")
    secret.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    add.add_argument("--iterations", type=_positive, default=4096, help="4096..16384")
    actions.add_parser("delete", parents=[common, who], help="remove a user's credentials")
    actions.add_parser("list", parents=[common], help="users and mechanisms (no secrets)")


def _run_users(args: argparse.Namespace) -> int:
    from spark_kafkalog import users_command

    password = getattr(args, "password", None)
    if getattr(args, "password_stdin", False):
        password = sys.stdin.readline().rstrip("\n")
    return users_command.run(
        args.action,
        args.log_dir,
        sys.stdout,
        getattr(args, "user", None),
        password,
        getattr(args, "mechanism", None),
        getattr(args, "iterations", 4096),
    )


def _add_acls(sub: argparse._SubParsersAction) -> None:
    acls = sub.add_parser("acls", help="the authorizer's ACLs (like kafka-acls)")
    actions = acls.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_log_dir_or_bootstrap(common)
    for flag in (
        "--topic",
        "--group",
        "--transactional-id",
        "--allow-principal",
        "--deny-principal",
        "--allow-host",
        "--deny-host",
        "--operation",
    ):
        common.add_argument(flag, action="append", default=[], help="repeatable")
    common.add_argument("--cluster", action="store_true", help="the Cluster resource")
    common.add_argument(
        "--resource-pattern-type",
        default="literal",
        help="literal | prefixed (add); also any | match (list, remove)",
    )
    actions.add_parser("add", parents=[common], help="add ACLs")
    listing = actions.add_parser("list", parents=[common], help="list ACLs")
    listing.add_argument("--principal", help="only this principal's ACLs")
    remove = actions.add_parser("remove", parents=[common], help="remove ACLs")
    remove.add_argument("--force", action="store_true", help="accepted; no prompt is asked")


def _run_acls(args: argparse.Namespace) -> int:
    from spark_kafkalog import acls_command

    if (args.log_dir is None) == (args.bootstrap_server is None):
        raise UsageError("exactly one of --log-dir and --bootstrap-server is required")
    values = acls_command.AclArgs(
        tuple(args.topic),
        tuple(args.group),
        tuple(args.transactional_id),
        args.cluster,
        args.resource_pattern_type,
        tuple(args.allow_principal),
        tuple(args.deny_principal),
        tuple(args.allow_host),
        tuple(args.deny_host),
        tuple(args.operation),
        getattr(args, "principal", None),
    )
    if args.log_dir is not None:
        return acls_command.run(
            args.action, acls_command.LogDirAcls(args.log_dir), values, sys.stdout
        )
    wire = _wire()
    with wire.open_client(args.bootstrap_server, args.command_config) as client:
        return acls_command.run(args.action, acls_command.WireAcls(client), values, sys.stdout)


def _add_log_dir_or_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-dir", type=Path, metavar="DIR", help="the Kafka log dir")
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="a running broker (kafkalog serve, or Kafka) instead of --log-dir",
    )
    _add_command_config(parser)


def _add_groups(sub: argparse._SubParsersAction) -> None:
    groups = sub.add_parser(
        "groups",
        help="list and describe groups from __consumer_offsets (like kafka-groups --list and "
        "kafka-consumer-groups --describe; every protocol type)",
    )
    actions = groups.add_subparsers(dest="action", required=True)
    log_dir = argparse.ArgumentParser(add_help=False)
    _add_log_dir_or_bootstrap(log_dir)
    actions.add_parser("list", parents=[log_dir], help="every group id")
    describe = actions.add_parser(
        "describe",
        parents=[log_dir],
        help="per partition: committed offset, log end offset, lag and the member holding it",
    )
    describe.add_argument(
        "--group", action="append", default=[], metavar="G", help="repeatable; default: all"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkalog",
        description=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected error"
    )
    cli_logging.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    common = _broker_options(bootstrap=True)
    _add_topics(sub, common)
    _add_produce(sub, common)
    _add_consume(sub, common)

    _add_serve(sub, _broker_options(bootstrap=False))
    _add_groups(sub)
    _add_users(sub)
    _add_acls(sub)

    from spark_kafkalog import upload_command

    upload = sub.add_parser(
        "upload", help="copy a log dir to object storage (s3://...), resumable and verified"
    )
    upload_command.add_arguments(upload)

    dump = sub.add_parser("dump", help="print and verify Kafka log segments")
    dump.add_argument("paths", nargs="+", type=Path, help="segment file, partition dir or log dir")
    dump.add_argument("--records", action="store_true", help="one line per record too")
    dump.add_argument("--json", action="store_true", help="one JSON object a line")
    dump.add_argument("--summary", action="store_true", help="only the summary line per file")
    dump.add_argument(
        "--verify",
        action="store_true",
        help="check every CRC and index entry; exit 1 on the first bad one",
    )

    compact = sub.add_parser(
        "compact",
        help="compact the partitions of a compaction config, without Spark (exit status: 0 "
        "done, 1 a partition failed, 2 bad configuration, 3 work left, 4 a bug)",
    )
    compaction_report.add_arguments(compact)

    demo = sub.add_parser(
        "demo",
        help="the main job: an embedded broker produces events, Spark reads, aggregates, "
        "compacts a topic, writes a derived topic and reads it back, streams an enriched copy",
    )
    demo.add_argument("--dir", type=Path, default=Path("demo-logdir"), help="recreated each run")
    demo.add_argument(
        "--events", type=_positive, default=300_000, help="events to produce (default 300000)"
    )
    cli_logging.add_to_every_subcommand(parser)
    return parser


def _run_topics(args: argparse.Namespace, config) -> int:
    from spark_kafkalog import topics_command

    overrides: list[str] = []
    if args.action == "create":
        overrides = args.config
    options = {
        "name": getattr(args, "name", None),
        "partitions": getattr(args, "partitions", 1),
        "replication_factor": getattr(args, "replication_factor", 1),
        "configs": overrides,
        "as_json": getattr(args, "json", False),
    }
    if args.bootstrap_server is not None:
        wire = _wire()
        with wire.open_client(args.bootstrap_server, args.command_config) as client:
            return wire.run_topics(args.action, client, sys.stdout, **options)
    return topics_command.run(args.action, args.log_dir, config, sys.stdout, **options)


def _run_produce(args: argparse.Namespace, config) -> int:
    from spark_kafkalog import console_producer
    from spark_kafkalog.topics_command import open_broker, parse_assignments

    headers = list(parse_assignments(args.header, "--header").items())
    options = {
        "partition": args.partition,
        "key_separator": args.key_separator,
        "headers": headers,
        "acks": args.acks,
        "compression": args.compression,
        "batch_size": args.batch_size,
    }
    if args.bootstrap_server is not None:
        wire = _wire()
        with wire.open_client(args.bootstrap_server, args.command_config) as client:
            target = wire.WireTarget(client)
            return console_producer.run(target, args.topic, sys.stdin.buffer, sys.stderr, **options)
    broker = open_broker(args.log_dir, config)
    try:
        return console_producer.run(
            console_producer.BrokerTarget(broker),
            args.topic,
            sys.stdin.buffer,
            sys.stderr,
            **options,
        )
    finally:
        broker.close()


def _run_consume(args: argparse.Namespace, config) -> int:
    from spark_kafkalog import console_consumer
    from spark_kafkalog.console_consumer import StartAt

    if args.offset is not None:
        start = StartAt.parse_offset(args.offset)
    elif args.timestamp is not None:
        start = StartAt("timestamp", args.timestamp)
    else:
        start = StartAt("earliest")
    sys.stdout.flush()
    options = {
        "partition": args.partition,
        "start": start,
        "max_messages": args.max_messages,
        "isolation_level": args.isolation_level,
        "output_format": args.format,
        "properties": args.property,
    }
    if args.bootstrap_server is not None:
        wire = _wire()
        console_consumer.check_options(**options)
        with wire.open_client(args.bootstrap_server, args.command_config) as client:
            source = wire.WireSource(client, args.bootstrap_server)
            return console_consumer.print_records(
                source, args.topic, sys.stdout.buffer, sys.stderr, **options
            )
    return console_consumer.consume(
        args.log_dir, config, args.topic, sys.stdout.buffer, sys.stderr, **options
    )


class ServerUnavailableError(KafkaLogError):
    """``kafkalog serve`` or ``--bootstrap-server`` on an interpreter without kio (3.10)."""


def _needs_kio(what: str, load: Callable[[], ModuleType]) -> ModuleType:
    """``load()`` (an import of a module that needs kio), or a one-line error naming ``what``."""
    # kio registers a hypothesis strategy for each of its value types when hypothesis is
    # importable (for kio's own tests): 1-2 s at the start of `kafkalog serve`. Hidden from
    # kio's first import in a process that has not imported hypothesis itself, then unhidden.
    hide = "kio" not in sys.modules and "hypothesis" not in sys.modules
    if hide:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:  # lazy: kio needs Python 3.11+; the log-dir commands work without it
        return load()
    except ImportError as e:
        if e.name is None or e.name.split(".")[0] != "kio":
            raise
        version = ".".join(map(str, sys.version_info[:3]))
        raise ServerUnavailableError(
            f"{what} needs Python 3.11+ with kio (the protocol schemas; pip install kio), "
            f"this is Python {version} without it"
        ) from None
    finally:
        if hide and sys.modules.get("hypothesis", False) is None:
            del sys.modules["hypothesis"]


def _wire() -> ModuleType:
    """spark_kafkalog.bootstrap_server (the commands over the wire; needs kio)."""
    return _needs_kio(
        "--bootstrap-server", lambda: importlib.import_module("spark_kafkalog.bootstrap_server")
    )


class UsageError(Exception):
    """A command line argparse accepts but that is not valid (exit status 2)."""


def _run_serve(args: argparse.Namespace, config) -> int:
    serve_command = _needs_kio(
        "the server", lambda: importlib.import_module("spark_kafkalog.serve_command")
    )
    metrics = None
    if args.metrics_port is not None:
        metrics = serve_command.MetricsOptions(args.metrics_host, args.metrics_port)
    return serve_command.run(
        args.log_dir,
        config,
        args.listeners,
        args.brokers,
        sys.stdout,
        sys.stdin,
        serve_command.load_security(args.broker_config),
        metrics,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    name = args.command + (f" {args.action}" if args.command in ("topics", "groups") else "")
    undo_logging = None
    try:
        undo_logging = _configure_logging(args)
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: the user's wish, not an error to explain
        return _report(f"kafkalog {name}: interrupted", 130)
    except UsageError as e:
        return _report(f"kafkalog {name}: {e}", 2)
    except (KafkaLogError, OSError) as e:
        if isinstance(e, BrokenPipeError):
            return 1
        return _report(f"kafkalog {name}: {e}", 1)
    except Exception as e:
        if args.debug:
            raise
        return _report(
            f"kafkalog {name}: unexpected {type(e).__name__}: {e} (a bug in kafkalog; "
            f"run kafkalog --debug {name} ... for the traceback)",
            3,
        )
    finally:
        if undo_logging is not None:  # in-process callers (tests) get their logging back
            undo_logging()


def _configure_logging(args: argparse.Namespace) -> Callable[[], None]:
    """``--log-level``/``--log-format``; for serve, else the broker config's ``[log]``."""
    level, fmt = args.log_level, args.log_format
    if args.command == "serve":
        file_level, file_fmt = cli_logging.load_log_settings(args.broker_config)
        level, fmt = level or file_level or "info", fmt or file_fmt
    return cli_logging.configure(level or "warning", fmt or "text")


def _report(message: str, status: int) -> int:
    """Print ``message`` to stderr as one line (after what stdout holds); ``status``."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    print(" ".join(message.splitlines()), file=sys.stderr)
    return status


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "command_config", None) and args.bootstrap_server is None:
        raise UsageError("--command-config needs --bootstrap-server (it configures the client)")
    if args.command in ("topics", "produce", "consume", "serve"):
        from spark_kafkalog.topics_command import load_config

        if args.command != "serve" and (args.log_dir is None) == (args.bootstrap_server is None):
            raise UsageError("exactly one of --log-dir and --bootstrap-server is required")
        config = load_config(args.broker_config)
        run = {
            "topics": _run_topics,
            "produce": _run_produce,
            "consume": _run_consume,
            "serve": _run_serve,
        }
        return run[args.command](args, config)
    if args.command == "groups":
        from spark_kafkalog import groups_command

        if (args.log_dir is None) == (args.bootstrap_server is None):
            raise UsageError("exactly one of --log-dir and --bootstrap-server is required")
        config = None
        if args.bootstrap_server is not None:
            config = _wire().client_config(args.command_config)  # the wire client needs kio
        return groups_command.run(
            args.action,
            args.log_dir,
            sys.stdout,
            sys.stderr,
            getattr(args, "group", []),
            args.bootstrap_server,
            config,
        )
    if args.command == "users":
        return _run_users(args)
    if args.command == "acls":
        return _run_acls(args)
    if args.command == "upload":
        from spark_kafkalog import upload_command

        try:
            return upload_command.run(args, sys.stdout)
        except upload_command.UploadUsageError as e:
            raise UsageError(str(e)) from None
    if args.command == "dump":
        from spark_kafkalog.dump_log import dump

        return dump(
            args.paths,
            sys.stdout,
            records=args.records,
            as_json=args.json,
            verify=args.verify,
            summary_only=args.summary,
        )
    if args.command == "compact":
        from spark_kafkalog.compaction_job import run_local

        return compaction_report.execute(
            args.config,
            args.report,
            lambda config: run_local(config, sys.stdout, dry_run=args.dry_run),
            "kafkalog compact",
        )
    if args.command == "demo":
        from spark_kafkalog.demo import run

        return run(args.dir, sys.stdout, events=args.events)
    return 2


if __name__ == "__main__":
    sys.exit(main())
