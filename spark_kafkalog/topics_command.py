"""``kafkalog topics``: create, list, describe and delete topics (Kafka's ``kafka-topics``).

With ``--log-dir`` each command opens an embedded :class:`~broker_embedded.broker.Broker` on
the log dir, which takes the log dir's ``.lock``: while another process owns the dir the
command fails with the :class:`LogDirLockedError` naming the holder, and changes nothing. The
broker is closed cleanly (checkpoints written) before the command returns. With
``--bootstrap-server`` the same commands go to a running server over the wire
(spark_kafkalog/bootstrap_server.py) and print the same.

Output (stdout):

- ``create``: ``Created topic NAME.``; ``delete``: ``Deleted topic NAME.``;
- ``list``: one topic name a line, sorted;
- ``describe``: per topic one line with its id, partition count, replication factor and config
  overrides, then one line per partition with leader, replicas, ISR, leader epoch, log start
  offset, high watermark and log end offset (tab-separated ``Name: value`` pairs, as
  kafka-topics prints them); with ``--json`` one JSON object a topic instead, which also holds
  the last stable offset and the effective config (defaults overlaid with the overrides)::

      {"topic": T, "topicId": BASE64, "partitionCount": N, "replicationFactor": N,
       "configs": {OVERRIDES}, "effectiveConfigs": {NAME: VALUE, ...},
       "partitions": [{"partition": P, "leader": ID, "leaderEpoch": E, "replicas": [ID],
                       "isr": [ID], "logStartOffset": O, "highWatermark": O,
                       "lastStableOffset": O, "logEndOffset": O}, ...]}

  Config values are strings (as Kafka's DescribeConfigs gives them); offsets are -1 for a
  replica not hosted here. The fields are stable (docs/operating/index.md): fields may be added,
  none is removed or renamed. ``--bootstrap-server`` prints the same.

Also here, for every broker-opening command: :func:`load_config` (the ``--broker-config FILE``),
:func:`open_broker`, :func:`parse_assignments` (``k=v`` arguments) and :class:`CommandError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import KafkaLogError
from broker_embedded.replication.topic_metadata import TopicMetadata
from broker_embedded.storage.log_dir import NotALogDirError, check_log_dir
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.topic_partition import TopicPartition


class CommandError(KafkaLogError):
    """A command line whose arguments cannot be carried out (missing log dir, bad ``k=v``, a
    partition the topic does not have); the message says which and why."""


def load_config(path: Path | None) -> BrokerConfig:
    """The broker config of ``--broker-config FILE`` (the built-in defaults without one)."""
    return BrokerConfig.load(path)


def require_log_dir(log_dir: Path) -> None:
    """A :class:`NotALogDirError` naming ``log_dir`` unless it is a Kafka log dir (reading
    commands never create one); a missing or empty one is told how to make one."""
    try:
        check_log_dir(log_dir)
    except NotALogDirError as e:
        if log_dir.exists() and not (log_dir.is_dir() and not any(log_dir.iterdir())):
            raise
        raise NotALogDirError(
            f"{e} (create a topic there first: kafkalog topics create --log-dir {log_dir} NAME)"
        ) from None


def open_broker(log_dir: Path, config: BrokerConfig, *, create: bool = False) -> Broker:
    """A broker owning ``log_dir``, which must be a log dir unless ``create`` (then a missing
    path or an empty directory becomes one; anything else is refused all the same)."""
    if not create:
        require_log_dir(log_dir)
    return Broker(log_dir, config=config, create=create)


def parse_assignments(items: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` to a dict (the value may contain ``=``; a later key wins)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"{what} {item!r} is not of the form key=value")
        out[key] = value
    return out


# -- the commands ----------------------------------------------------------------------------------


def create(
    broker: Broker,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    out: TextIO,
) -> None:
    broker.create_topic(name, partitions, replication_factor, configs)
    out.write(f"Created topic {name}.\n")


def delete(broker: Broker, name: str, out: TextIO) -> None:
    broker.delete_topic(name)
    out.write(f"Deleted topic {name}.\n")


def list_topics(broker: Broker, out: TextIO) -> None:
    for name in broker.list_topics():
        out.write(name + "\n")


def describe_one(broker: Broker, meta: TopicMetadata) -> dict:
    """What ``describe --json`` prints for one topic."""
    partitions = []
    for p in meta.partitions:
        log = broker.log_manager.get_log(TopicPartition(meta.name, p.partition))
        if log is None:  # a replica not hosted here (never for a standalone broker)
            start = hw = lso = leo = -1
        else:
            start, hw = log.log_start_offset, log.high_watermark
            lso, leo = log.last_stable_offset, log.log_end_offset
        partitions.append(
            {
                "partition": p.partition,
                "leader": p.leader,
                "leaderEpoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "logStartOffset": start,
                "highWatermark": hw,
                "lastStableOffset": lso,
                "logEndOffset": leo,
            }
        )
    return {
        "topic": meta.name,
        "topicId": topic_id_to_string(meta.topic_id),
        "partitionCount": len(meta.partitions),
        "replicationFactor": meta.replication_factor,
        "configs": dict(sorted(meta.config.items())),
        "effectiveConfigs": broker.topic_config(meta.name),
        "partitions": partitions,
    }


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def describe(broker: Broker, names: list[str] | None, out: TextIO, *, as_json: bool) -> None:
    """Describe ``names`` (every topic when ``None``)."""
    for meta in broker.metadata(names):
        write_description(describe_one(broker, meta), out, as_json=as_json)


def write_description(d: dict, out: TextIO, *, as_json: bool) -> None:
    """One topic's ``describe`` output from its :func:`describe_one` dict."""
    if as_json:
        out.write(json.dumps(d) + "\n")
        return
    configs = ",".join(f"{k}={v}" for k, v in d["configs"].items())
    out.write(
        f"Topic: {d['topic']}\tTopicId: {d['topicId']}\tPartitionCount: "
        f"{d['partitionCount']}\tReplicationFactor: {d['replicationFactor']}\t"
        f"Configs: {configs}\n"
    )
    for p in d["partitions"]:
        out.write(
            f"\tTopic: {d['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
            f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}\t"
            f"LeaderEpoch: {p['leaderEpoch']}\tLogStartOffset: {p['logStartOffset']}\t"
            f"HighWatermark: {p['highWatermark']}\tLogEndOffset: {p['logEndOffset']}\n"
        )


def run(
    action: str,
    log_dir: Path,
    config: BrokerConfig,
    out: TextIO,
    *,
    name: str | None = None,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: Iterable[str] = (),
    as_json: bool = False,
) -> int:
    """One ``kafkalog topics ACTION``; errors raise :class:`KafkaLogError`."""
    overrides = parse_assignments(configs, "--config") if action == "create" else {}
    broker = open_broker(log_dir, config, create=action == "create")
    try:
        if action == "create":
            assert name is not None
            create(broker, name, partitions, replication_factor, overrides, out)
        elif action == "list":
            list_topics(broker, out)
        elif action == "describe":
            describe(broker, None if name is None else [name], out, as_json=as_json)
        elif action == "delete":
            assert name is not None
            delete(broker, name, out)
        else:  # pragma: no cover - argparse restricts the actions
            raise CommandError(f"unknown topics action {action!r}")
    finally:
        broker.close()
    return 0
