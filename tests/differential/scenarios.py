"""The scenarios the differential tests run on Kafka 3.9 and on kafkalog, by name.

Each is a function of a :class:`Run`: a sequence of requests (the versions both servers serve)
with its own fresh topic names. The API keys: Produce 0, Fetch 1, ListOffsets 2, Metadata 3,
OffsetCommit 8, OffsetFetch 9, FindCoordinator 10, JoinGroup 11, Heartbeat 12, LeaveGroup 13,
SyncGroup 14, ApiVersions 18, CreateTopics 19, DeleteRecords 21, InitProducerId 22,
AddPartitionsToTxn 24, EndTxn 26, DescribeConfigs 32.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from broker_embedded.protocol.schemas import api_name
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import Record
from tests.differential.scenario import BASE_TIMESTAMP, Run, Scenario, batch

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS = 18, 19, 21, 32

# The versions both servers serve (Kafka 3.9's ranges cut to kafkalog's).
VERSIONS = {
    API_VERSIONS: range(0, 5),
    METADATA: range(0, 13),
    CREATE_TOPICS: range(2, 8),
    PRODUCE: range(3, 12),
    FETCH: range(4, 18),
    LIST_OFFSETS: range(1, 10),
    DESCRIBE_CONFIGS: range(1, 5),
    DELETE_RECORDS: range(0, 3),
}


def api_versions(run: Run) -> None:
    """ApiVersions at every version; the key/version table is compared by API name."""
    for v in VERSIONS[API_VERSIONS]:
        run.call(
            f"v{v}",
            API_VERSIONS,
            v,
            {"client_software_name": "diff", "client_software_version": "1"},
            view=_api_table,
        )


def _api_table(answer: dict[str, Any]) -> dict[str, Any]:
    table = {
        api_name(k["api_key"]): f"{k['min_version']}..{k['max_version']}"
        for k in answer["api_keys"]
    }
    return {**answer, "api_keys": table}


def metadata(run: Run) -> None:
    """Metadata of an existing topic (2 partitions) and an unknown one at every version, with
    auto-creation off (v4+) and on (a new name per version)."""
    topic = run.topic("meta")
    run.create(topic, 2)
    for v in VERSIONS[METADATA]:
        names = [topic] if v < 4 else [topic, run.topic(f"meta-unknown-{v}")]
        run.call(f"v{v} existing+unknown", METADATA, v, _metadata_request(names, auto=False))
    for v in (4, 12):
        created = run.topic(f"meta-auto-{v}")
        run.call(f"v{v} auto-create", METADATA, v, _metadata_request([created], auto=True))
        run.wait_ready(created, 1)
        run.call(f"v{v} auto-created", METADATA, v, _metadata_request([created], auto=False))


def _metadata_request(names: list[str], auto: bool) -> dict[str, Any]:
    return {
        "topics": [{"name": n, "topic_id": None} for n in names],
        "allow_auto_topic_creation": auto,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def create_topics(run: Run) -> None:
    """CreateTopics with configs and manual assignments, and its errors, at every version."""
    for v in VERSIONS[CREATE_TOPICS]:
        good = run.topic(f"ct-{v}")
        run.call(
            f"v{v} configs",
            CREATE_TOPICS,
            v,
            {
                "topics": [
                    _creatable(
                        good, 3, 1, configs={"cleanup.policy": "compact", "retention.ms": "1000"}
                    ),
                    _creatable(run.topic(f"ct-assigned-{v}"), -1, -1, assignments=[[1], [1]]),
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        run.call(
            f"v{v} errors",
            CREATE_TOPICS,
            v,
            {
                "topics": [
                    _creatable(good, 1, 1),
                    _creatable(run.topic(f"ct-zero-{v}"), 0, 1),
                    _creatable(run.topic(f"ct-rf-{v}"), 1, 3),
                    _creatable(
                        run.topic(f"ct-badcfg-{v}"), 1, 1, configs={"cleanup.policy": "nope"}
                    ),
                    _creatable(
                        run.topic(f"ct-unknowncfg-{v}"), 1, 1, configs={"no.such.config": "1"}
                    ),
                    _creatable(run.topic(f"ct-badnode-{v}"), -1, -1, assignments=[[7]]),
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        run.call(
            f"v{v} validate_only",
            CREATE_TOPICS,
            v,
            {
                "topics": [_creatable(run.topic(f"ct-validate-{v}"), 2, 1)],
                "timeout": 30_000,
                "validate_only": True,
            },
        )


def _creatable(
    name: str,
    partitions: int,
    replication: int,
    configs: dict[str, str] | None = None,
    assignments: list[list[int]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": replication,
        "assignments": [
            {"partition_index": i, "broker_ids": b} for i, b in enumerate(assignments or [])
        ],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def _produce(
    run: Run, label: str, v: int, topic: str, records: bytes, partition: int = 0, **extra: Any
) -> Any:
    return run.call(
        label,
        PRODUCE,
        v,
        {
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
            **extra,
        },
    )


def _fetch(
    run: Run,
    label: str,
    v: int,
    topic: str,
    offset: int,
    *,
    partition_max: int = 1 << 20,
    max_bytes: int = 50 << 20,
    isolation: int = 0,
    session: tuple[int, int] = (0, -1),
    forget: bool = False,
    leader_epoch: int = -1,
    partition: int = 0,
) -> Any:
    """A Fetch of one partition that does not wait (max wait 0); by topic id from v13;
    ``forget``: the partition in ``forgotten_topics_data`` instead (sessions)."""
    topic_id = run.topic_id(topic) if v >= 13 else None
    fetched = {
        "topic": topic,
        "topic_id": topic_id,
        "partitions": [
            {
                "partition": partition,
                "current_leader_epoch": leader_epoch,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max,
            }
        ],
    }
    forgotten = {"topic": topic, "topic_id": topic_id, "partitions": [partition]}
    return run.call(
        label,
        FETCH,
        v,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": isolation,
            "session_id": session[0],
            "session_epoch": session[1],
            "topics": [] if forget else [fetched],
            "forgotten_topics_data": [forgotten] if forget else [],
            "rack_id": "",
        },
    )


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def produce_codecs(run: Run) -> None:
    """Produce in each codec at every version (zstd from v7), then Fetch v12 reads it back."""
    topic = run.topic("codecs")
    run.create(topic)
    offset = 0
    for v in VERSIONS[PRODUCE]:
        for name, codec in CODECS.items():
            if codec == 4 and v < 7:
                continue
            _produce(run, f"v{v} {name}", v, topic, batch([b"a" * 50, b"b"], compression=codec))
            offset += 2
    _fetch(run, "fetch all", 12, topic, 0)


def produce_errors(run: Run) -> None:
    """Produce's errors: an unknown topic and partition, a batch over ``max.message.bytes``,
    a record with a bad CRC, and a LogAppendTime topic (its timestamps)."""
    small = run.topic("small")
    run.create(small, configs={"max.message.bytes": "200"})
    append = run.topic("append")
    run.create(append, configs={"message.timestamp.type": "LogAppendTime"})
    for v in (3, 8, 11):
        _produce(run, f"v{v} too large", v, small, batch([b"x" * 300]))
        _produce(run, f"v{v} unknown partition", v, small, batch([b"x"]), partition=5)
        corrupt = bytearray(batch([b"y"]))
        corrupt[-1] ^= 0xFF
        _produce(run, f"v{v} bad crc", v, small, bytes(corrupt))
        _produce(run, f"v{v} log append time", v, append, batch([b"z", b"w"]))
    _fetch(run, "fetch append time", 12, append, 0)
    for name, ts in (("latest", -1), ("max timestamp", -3), ("by timestamp", 1)):
        run.call(
            f"append time: list offsets {name}",
            LIST_OFFSETS,
            9,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": append,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                        ],
                    }
                ],
            },
        )


def produce_idempotent(run: Run) -> None:
    """An idempotent producer: in order, a duplicate, a gap (out of order), an unknown pid."""
    topic = run.topic("idem")
    run.create(topic)
    pid = run.until(
        "init",
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    v = 9
    _produce(run, "seq 0", v, topic, batch([b"a", b"b"], base_sequence=0, **ident))
    _produce(run, "seq 2", v, topic, batch([b"c"], base_sequence=2, **ident))
    _produce(run, "duplicate seq 2", v, topic, batch([b"c"], base_sequence=2, **ident))
    _produce(run, "duplicate seq 0", v, topic, batch([b"a", b"b"], base_sequence=0, **ident))
    _produce(run, "gap seq 9", v, topic, batch([b"d"], base_sequence=9, **ident))
    _produce(
        run,
        "unknown pid",
        v,
        topic,
        batch([b"e"], base_sequence=0, producer_id=987654, producer_epoch=0),
    )
    _fetch(run, "fetch", 12, topic, 0)


def fetch_edges(run: Run) -> None:
    """Fetch at the log start, inside, at the high watermark, past it, with byte limits under
    one batch (KIP-74) and between batches, at every version; and at the log start after
    DeleteRecords."""
    topic = run.topic("fetch")
    run.create(topic)
    for i in range(3):
        _produce(run, f"produce {i}", 9, topic, batch([b"%d" % i * 100] * 4))
    for v in VERSIONS[FETCH]:
        _fetch(run, f"v{v} start", v, topic, 0)
        _fetch(run, f"v{v} middle", v, topic, 5)
        _fetch(run, f"v{v} high watermark", v, topic, 12)
        _fetch(run, f"v{v} past end", v, topic, 13)
        _fetch(run, f"v{v} partition max 10", v, topic, 0, partition_max=10)
        _fetch(run, f"v{v} partition max 500", v, topic, 0, partition_max=500)
        _fetch(run, f"v{v} partition max 700", v, topic, 0, partition_max=700)
        _fetch(run, f"v{v} max bytes 700", v, topic, 0, max_bytes=700)
        _fetch(run, f"v{v} max bytes 10", v, topic, 4, max_bytes=10)
    run.call(
        "delete records",
        DELETE_RECORDS,
        2,
        {
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 6}]}],
            "timeout": 30_000,
        },
    )
    _fetch(run, "below log start", 12, topic, 2)
    _fetch(run, "at log start", 12, topic, 6)


def list_offsets(run: Run) -> None:
    """ListOffsets: earliest, latest, by timestamp (before, inside, after), max-timestamp (v7+)
    at every version."""
    topic = run.topic("offsets")
    run.create(topic)
    for i in range(3):
        _produce(
            run, f"produce {i}", 9, topic, batch([b"v"] * 3, timestamp=BASE_TIMESTAMP + 100 * i)
        )
    specs = {
        "earliest": -2,
        "latest": -1,
        "ts before": 1,
        "ts inside": BASE_TIMESTAMP + 101,
        "ts after": BASE_TIMESTAMP + 10_000,
        "max timestamp": -3,
    }
    for v in VERSIONS[LIST_OFFSETS]:
        for name, ts in specs.items():
            if ts == -3 and v < 7:
                continue
            run.call(
                f"v{v} {name}",
                LIST_OFFSETS,
                v,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "current_leader_epoch": -1,
                                    "timestamp": ts,
                                    "max_num_offsets": 1,
                                }
                            ],
                        }
                    ],
                },
            )
    run.call(
        "unknown partition",
        LIST_OFFSETS,
        9,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 3, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )


def describe_configs(run: Run) -> None:
    """DescribeConfigs of a topic with two configs set, by key and all, and unknown topic."""
    topic = run.topic("configs")
    run.create(topic, configs={"retention.ms": "12345", "cleanup.policy": "compact"})
    for v in VERSIONS[DESCRIBE_CONFIGS]:
        run.call(
            f"v{v} keys",
            DESCRIBE_CONFIGS,
            v,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configuration_keys": ["retention.ms", "cleanup.policy", "segment.bytes"],
                    },
                    {"resource_type": 2, "resource_name": topic, "configuration_keys": None},
                    {
                        "resource_type": 2,
                        "resource_name": run.topic("configs-unknown"),
                        "configuration_keys": None,
                    },
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )


def delete_records(run: Run) -> None:
    """DeleteRecords: inside, to the high watermark (-1), past it, unknown partition."""
    topic = run.topic("delrec")
    run.create(topic)
    _produce(run, "produce", 9, topic, batch([b"x"] * 5))
    for v in VERSIONS[DELETE_RECORDS]:
        for name, offset, partition in (
            ("inside", 1 + v, 0),
            ("past end", 99, 0),
            ("unknown partition", 0, 4),
        ):
            run.call(
                f"v{v} {name}",
                DELETE_RECORDS,
                v,
                {
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [{"partition_index": partition, "offset": offset}],
                        }
                    ],
                    "timeout": 30_000,
                },
            )
    run.call(
        "to high watermark",
        DELETE_RECORDS,
        2,
        {
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}],
            "timeout": 30_000,
        },
    )


FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS = 8, 9, 15
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26
SESSION_MS = 10_000


def _committed_error(answer: dict[str, Any]) -> str:
    """The first partition's error (Kafka answers NOT_COORDINATOR while the coordinator it
    named still loads the group's partition: clients retry)."""
    return answer["topics"][0]["partitions"][0]["error_code"]


def _find_coordinator(run: Run, label: str, key: str, key_type: int) -> None:
    """FindCoordinator v3 and v4, each until the coordinator has loaded."""
    run.until(f"{label} v3", FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
    run.call(f"{label} v4", FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})


def _join(group: str, member: str, topic: str) -> dict[str, Any]:
    """A JoinGroup of a consumer subscribed to ``topic`` (ConsumerProtocolSubscription v0:
    version, topics, null user data)."""
    name = topic.encode()
    subscription = struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)
    return {
        "group_id": group,
        "session_timeout": SESSION_MS,
        "rebalance_timeout": SESSION_MS,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription}],
        "reason": None,
    }


def _beat(group: str, generation: int, member: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
    }


def _sync(group: str, generation: int, member: str, assign: list[str]) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [
            {"member_id": m, "assignment": b"assignment %d" % i} for i, m in enumerate(assign)
        ],
    }


def _commit(group: str, generation: int, member: str, topic: str, offset: int) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "group_instance_id": None,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "meta",
                    }
                ],
            }
        ],
    }


def groups(run: Run) -> None:
    """A consumer group through a full rebalance: FindCoordinator, JoinGroup (member id
    required), SyncGroup, Heartbeat and its errors (unknown member, illegal generation,
    rebalance in progress), a second member joining, OffsetCommit/OffsetFetch, LeaveGroup,
    DescribeGroups."""
    group, topic = run.topic("group"), run.topic("group-topic")
    run.create(topic)
    _find_coordinator(run, "find group", group, 0)
    first = run.until("join a (no id)", JOIN_GROUP, 9, _join(group, "", topic))
    a = first["member_id"]
    joined = run.call("join a", JOIN_GROUP, 9, _join(group, a, topic))
    gen = joined["generation_id"]
    run.call("sync a", SYNC_GROUP, 5, _sync(group, gen, a, [a]))
    run.call("heartbeat a", HEARTBEAT, 4, _beat(group, gen, a))
    run.call("heartbeat unknown member", HEARTBEAT, 4, _beat(group, gen, "nobody"))
    run.call("heartbeat old generation", HEARTBEAT, 4, _beat(group, gen + 5, a))
    run.call("commit a", OFFSET_COMMIT, 8, _commit(group, gen, a, topic, 3))
    run.call("commit bad generation", OFFSET_COMMIT, 8, _commit(group, gen + 5, a, topic, 4))
    run.call("commit unknown member", OFFSET_COMMIT, 8, _commit(group, gen, "nobody", topic, 4))
    other = run.connect()
    b = run.receive("join b (no id)", other, other.send(JOIN_GROUP, 9, _join(group, "", topic)))
    b_id = b["member_id"]
    waiting = other.send(JOIN_GROUP, 9, _join(group, b_id, topic))
    _until_rebalancing(run, group, gen, a)
    run.call("heartbeat a, rebalancing", HEARTBEAT, 4, _beat(group, gen, a))
    rejoined = run.call("rejoin a", JOIN_GROUP, 9, _join(group, a, topic))
    run.receive("join b", other, waiting)
    gen2 = rejoined["generation_id"]
    sync_b = other.send(SYNC_GROUP, 5, _sync(group, gen2, b_id, []))
    run.call("sync a, gen 2", SYNC_GROUP, 5, _sync(group, gen2, a, [a, b_id]))
    run.receive("sync b", other, sync_b)
    run.call("commit a, gen 2", OFFSET_COMMIT, 8, _commit(group, gen2, a, topic, 5))
    for stable in (False, True):
        run.call(
            f"fetch offsets stable={stable}",
            OFFSET_FETCH,
            8,
            {
                "groups": [
                    {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}
                ],
                "require_stable": stable,
            },
        )
    run.call(
        "describe",
        DESCRIBE_GROUPS,
        5,
        {"groups": [group, run.topic("no-group")], "include_authorized_operations": False},
    )
    run.call(
        "leave b",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": b_id, "group_instance_id": None, "reason": None}],
        },
    )
    run.call(
        "leave unknown",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": "nobody", "group_instance_id": None, "reason": None}],
        },
    )


def _until_rebalancing(run: Run, group: str, generation: int, member: str) -> None:
    """Heartbeats (not compared) until the coordinator says the group rebalances."""
    deadline = time.monotonic() + 30.0
    while run.quiet(HEARTBEAT, 4, _beat(group, generation, member))["error_code"] == "none":
        assert time.monotonic() < deadline, f"group {group} never started rebalancing"
        time.sleep(0.05)


def transactions(run: Run) -> None:
    """A transactional producer: FindCoordinator, InitProducerId, an aborted and a committed
    transaction, Fetch of both isolation levels (aborted transactions lists, the LSO),
    ListOffsets read_committed, then fencing by a second InitProducerId and the errors of the
    old epoch, EndTxn with no transaction."""
    txn, topic = run.topic("txn"), run.topic("txn-topic")
    run.create(topic)
    _find_coordinator(run, "find txn", txn, 1)
    init = {
        "transactional_id": txn,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = run.until("init", INIT_PRODUCER_ID, 4, init)
    ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    add = {
        "v3_and_below_transactional_id": txn,
        "v3_and_below_producer_id": ident["producer_id"],
        "v3_and_below_producer_epoch": ident["producer_epoch"],
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
    }
    end = {"transactional_id": txn, **ident}
    for i, commit in enumerate((False, True)):
        run.until(f"add partitions {i}", ADD_PARTITIONS_TO_TXN, 3, add, BUSY, _added_error)
        run.until(
            f"produce {i}",
            PRODUCE,
            9,
            {
                "acks": -1,
                "timeout": 30_000,
                "transactional_id": txn,
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [
                            {
                                "index": 0,
                                "records": batch(
                                    [b"t%d" % i] * 2,
                                    base_sequence=2 * i,
                                    transactional=True,
                                    **ident,
                                ),
                            }
                        ],
                    }
                ],
            },
            VERIFYING,
            _produce_error,
        )
        run.call(f"end {i} commit={commit}", END_TXN, 3, {**end, "committed": commit})
        _until_stable(run, topic)
    for v in (4, 12):
        for isolation in (0, 1):
            _fetch(run, f"fetch v{v} isolation {isolation}", v, topic, 0, isolation=isolation)
    run.call(
        "list offsets committed",
        LIST_OFFSETS,
        9,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )
    run.until(
        "init again (fences)", INIT_PRODUCER_ID, 4, init, frozenset({"concurrent_transactions"})
    )
    run.call("add partitions, old epoch", ADD_PARTITIONS_TO_TXN, 3, add)
    _produce(
        run,
        "produce, old epoch",
        9,
        topic,
        batch([b"old"], base_sequence=4, transactional=True, **ident),
        transactional_id=txn,
    )
    run.call("end, old epoch", END_TXN, 3, {**end, "committed": True})
    fenced = run.quiet(INIT_PRODUCER_ID, 4, init)  # the epoch after "init again"
    current = {"producer_id": fenced["producer_id"], "producer_epoch": fenced["producer_epoch"]}
    _produce(
        run,
        "produce, partition not added",
        9,
        topic,
        batch([b"unadded"], base_sequence=0, transactional=True, **current),
        transactional_id=txn,
    )
    run.call(
        "end, no transaction", END_TXN, 3, {"transactional_id": txn, **current, "committed": True}
    )


# What a transactional client retries: the coordinator completing the previous transaction,
# and (Kafka's KIP-890 verification while __transaction_state loads) NOT_LEADER_OR_FOLLOWER
# and NOT_ENOUGH_REPLICAS.
BUSY = frozenset({"concurrent_transactions", "coordinator_load_in_progress"})
VERIFYING = frozenset({"not_leader_or_follower", "not_enough_replicas"}) | BUSY


def _added_error(answer: dict[str, Any]) -> str:
    return answer["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"
    ]


def _produce_error(answer: dict[str, Any]) -> str:
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def _until_stable(run: Run, topic: str) -> None:
    """Fetches read_committed (not compared) until the LSO reaches the high watermark (the
    transaction's marker written)."""
    deadline = time.monotonic() + 30.0
    while True:
        answer = run.quiet(
            FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1,
                "isolation_level": 1,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        part = answer["responses"][0]["partitions"][0]
        if part["last_stable_offset"] == part["high_watermark"]:
            return
        assert time.monotonic() < deadline, f"{topic}: the LSO stays at {part}"
        time.sleep(0.05)


def fetch_sessions(run: Run) -> None:
    """Incremental fetch sessions (KIP-227) at v7, v12 and v15: a full fetch opening a
    session, an incremental one with nothing new, one after new records, a stale epoch, an
    unknown session id, forgetting the partition, closing the session."""
    topic = run.topic("sessions")
    run.create(topic)
    _produce(run, "produce 0", 9, topic, batch([b"a", b"b"]))
    for v in (7, 12, 15):
        opened = _fetch(run, f"v{v} open", v, topic, 0, session=(0, 0))
        sid = opened["session_id"]
        _fetch(run, f"v{v} epoch 1, nothing new", v, topic, 2, session=(sid, 1))
        _produce(run, f"v{v} produce", 9, topic, batch([b"c"]))
        _fetch(run, f"v{v} epoch 2, new records", v, topic, 2, session=(sid, 2))
        _fetch(run, f"v{v} stale epoch", v, topic, 2, session=(sid, 2))
        _fetch(run, f"v{v} unknown session", v, topic, 2, session=(sid + 12345, 1))
        _fetch(run, f"v{v} forget", v, topic, 3, session=(sid, 3), forget=True)
        _fetch(run, f"v{v} close", v, topic, 3, session=(sid, -1))


def fetch_epochs(run: Run) -> None:
    """Fetch and ListOffsets with a current leader epoch: the current one, an older one
    (FENCED_LEADER_EPOCH), a newer one (UNKNOWN_LEADER_EPOCH); Fetch of an unknown partition
    and topic."""
    topic = run.topic("epochs")
    run.create(topic)
    _produce(run, "produce", 9, topic, batch([b"a"]))
    for epoch in (0, -5, 7):
        _fetch(run, f"fetch epoch {epoch}", 12, topic, 0, leader_epoch=epoch)
        run.call(
            f"list offsets epoch {epoch}",
            LIST_OFFSETS,
            9,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}
                        ],
                    }
                ],
            },
        )
    _fetch(run, "fetch unknown topic", 12, run.topic("epochs-unknown"), 0)
    _fetch(run, "fetch unknown partition", 12, topic, 0, partition=3)


ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT = 25, 28


def offsets_stable(run: Run) -> None:
    """OffsetCommit and OffsetFetch at every version both serve for a group with no members,
    then a transactional offset commit pending: OffsetFetch with and without
    ``require_stable`` (v7+), then after the commit."""
    group, topic, txn = run.topic("stable"), run.topic("stable-topic"), run.topic("stable-txn")
    run.create(topic)
    _find_coordinator(run, "find group", group, 0)
    for v in range(2, 10):
        body = {**_commit(group, -1, "", topic, 10 + v), "retention_time": -1}
        if v == 2:  # the group's partition may still be loading on Kafka: retried, as clients do
            run.until(f"commit v{v}", OFFSET_COMMIT, v, body, error=_committed_error)
        else:
            run.call(f"commit v{v}", OFFSET_COMMIT, v, body)
    for v in range(1, 10):
        run.call(
            f"fetch v{v}",
            OFFSET_FETCH,
            v,
            {
                "group_id": group,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "groups": [
                    {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
                ],
                "require_stable": False,
            },
        )
    _find_coordinator(run, "find txn", txn, 1)
    init = {
        "transactional_id": txn,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = run.until("init", INIT_PRODUCER_ID, 4, init)
    ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    run.until(
        "add offsets",
        ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": txn, **ident, "group_id": group},
        BUSY,
    )
    run.call(
        "txn offset commit",
        TXN_OFFSET_COMMIT,
        3,
        {
            "transactional_id": txn,
            "group_id": group,
            **ident,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 99,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "txn",
                        }
                    ],
                }
            ],
        },
    )
    for stable in (False, True):
        for v in (7, 8):
            run.call(
                f"pending v{v} stable={stable}",
                OFFSET_FETCH,
                v,
                {
                    "group_id": group,
                    "topics": [{"name": topic, "partition_indexes": [0]}],
                    "groups": [
                        {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
                    ],
                    "require_stable": stable,
                },
            )
    run.call("end commit", END_TXN, 3, {"transactional_id": txn, **ident, "committed": True})
    run.until(
        "committed v8 stable",
        OFFSET_FETCH,
        8,
        {
            "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}],
            "require_stable": True,
        },
        frozenset({"unstable_offset_commit"}),
        _fetched_error,
    )


def _fetched_error(answer: dict[str, Any]) -> str:
    return answer["groups"][0]["topics"][0]["partitions"][0]["error_code"]


CREATE_PARTITIONS, DELETE_TOPICS, DELETE_GROUPS, OFFSET_DELETE = 37, 20, 42, 47
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS = 61, 65


def admin(run: Run) -> None:
    """CreatePartitions (more, fewer, validate only, unknown topic, a manual assignment),
    DeleteTopics (existing, unknown), DescribeProducers, DeleteGroups and OffsetDelete of an
    unknown group."""
    topic = run.topic("admin")
    run.create(topic)
    for v in (0, 3):
        run.call(
            f"create partitions v{v}",
            CREATE_PARTITIONS,
            v,
            {
                "topics": [
                    {"name": topic, "count": 2 + v, "assignments": None},
                    {"name": run.topic("admin-unknown"), "count": 2, "assignments": None},
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    run.wait_ready(topic, 5)
    run.call(
        "fewer partitions",
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": topic, "count": 2, "assignments": None}],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    run.call(
        "validate only",
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": topic, "count": 9, "assignments": None}],
            "timeout": 30_000,
            "validate_only": True,
        },
    )
    run.call(
        "bad assignment",
        CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": topic, "count": 6, "assignments": [{"broker_ids": [4]}]}],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    _produce(run, "produce", 9, topic, batch([b"a"]))
    run.call(
        "describe producers",
        DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": topic, "partition_indexes": [0, 9]}]},
    )
    group = run.topic("admin-group")
    _find_coordinator(run, "find group", group, 0)
    run.call("delete unknown group", DELETE_GROUPS, 2, {"groups_names": [group]})
    run.call(
        "offset delete unknown group",
        OFFSET_DELETE,
        0,
        {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
    )
    for v in (1, 6):
        run.call(
            f"delete topics v{v}",
            DELETE_TOPICS,
            v,
            {
                "topic_names": [run.topic(f"admin-gone-{v}")],
                "topics": [{"name": run.topic(f"admin-gone-{v}"), "topic_id": None}],
                "timeout": 30_000,
            },
        )
    run.call(
        "delete topic",
        DELETE_TOPICS,
        6,
        {"topics": [{"name": topic, "topic_id": None}], "timeout": 30_000},
    )


def group_versions(run: Run) -> None:
    """One member's group at every JoinGroup version (0-9, a group each), with SyncGroup,
    Heartbeat, DescribeGroups and LeaveGroup at the highest version each has at or below it."""
    topic = run.topic("gv-topic")
    run.create(topic)
    _find_coordinator(run, "find group", run.topic("gv-0"), 0)
    for v in range(10):
        group = run.topic(f"gv-{v}")
        joined = run.until(f"join v{v}", JOIN_GROUP, v, _join(group, "", topic))
        member = joined["member_id"]
        if joined["error_code"] == "member_id_required":
            joined = run.call(f"join again v{v}", JOIN_GROUP, v, _join(group, member, topic))
        gen = joined["generation_id"]
        run.call(f"sync v{min(v, 5)}", SYNC_GROUP, min(v, 5), _sync(group, gen, member, [member]))
        run.call(f"heartbeat v{min(v, 4)}", HEARTBEAT, min(v, 4), _beat(group, gen, member))
        run.call(
            f"describe v{min(v, 5)}",
            DESCRIBE_GROUPS,
            min(v, 5),
            {"groups": [group], "include_authorized_operations": False},
        )
        run.call(
            f"leave v{min(v, 5)}",
            LEAVE_GROUP,
            min(v, 5),
            {
                "group_id": group,
                "member_id": member,
                "members": [{"member_id": member, "group_instance_id": None, "reason": None}],
            },
        )
        run.call(
            f"heartbeat after leave v{min(v, 4)}", HEARTBEAT, min(v, 4), _beat(group, gen, member)
        )


def static_members(run: Run) -> None:
    """A static member (``group.instance.id``): joined at once without MEMBER_ID_REQUIRED,
    replaced by a new member with the same instance id (the old member id fenced), a
    heartbeat and a leave of the fenced one, the leave by instance id."""
    group, topic = run.topic("static"), run.topic("static-topic")
    run.create(topic)
    _find_coordinator(run, "find group", group, 0)
    first = run.until(
        "join", JOIN_GROUP, 9, {**_join(group, "", topic), "group_instance_id": "instance-1"}
    )
    old, gen = first["member_id"], first["generation_id"]
    run.call(
        "sync", SYNC_GROUP, 5, {**_sync(group, gen, old, [old]), "group_instance_id": "instance-1"}
    )
    again = run.call(
        "join again, new member id",
        JOIN_GROUP,
        9,
        {**_join(group, "", topic), "group_instance_id": "instance-1"},
    )
    new = again["member_id"]
    run.call(
        "heartbeat of the old member id",
        HEARTBEAT,
        4,
        {**_beat(group, gen, old), "group_instance_id": "instance-1"},
    )
    run.call(
        "heartbeat of the new member id",
        HEARTBEAT,
        4,
        {**_beat(group, again["generation_id"], new), "group_instance_id": "instance-1"},
    )
    run.call(
        "describe", DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
    )
    run.call(
        "leave, old member id",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": old, "group_instance_id": "instance-1", "reason": None}],
        },
    )
    run.call(
        "leave by instance id",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": "", "group_instance_id": "instance-1", "reason": None}],
        },
    )


def open_transaction(run: Run) -> None:
    """A transaction left open: Fetch of both isolation levels (the LSO below the high
    watermark), ListOffsets read_committed, then the abort and the same again."""
    txn, topic = run.topic("open-txn"), run.topic("open-txn-topic")
    run.create(topic)
    _produce(run, "produce plain", 9, topic, batch([b"p1", b"p2"]))
    _find_coordinator(run, "find txn", txn, 1)
    init = {
        "transactional_id": txn,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = run.until("init", INIT_PRODUCER_ID, 4, init)
    ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    run.until(
        "add partitions",
        ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": txn,
            "v3_and_below_producer_id": ident["producer_id"],
            "v3_and_below_producer_epoch": ident["producer_epoch"],
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
        BUSY,
        _added_error,
    )
    run.until(
        "produce in txn",
        PRODUCE,
        9,
        {
            "acks": -1,
            "timeout": 30_000,
            "transactional_id": txn,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {
                            "index": 0,
                            "records": batch(
                                [b"t1", b"t2"], base_sequence=0, transactional=True, **ident
                            ),
                        }
                    ],
                }
            ],
        },
        VERIFYING,
        _produce_error,
    )
    _produce(run, "produce plain after", 9, topic, batch([b"p3"]))
    for step in ("open", "aborted"):
        if step == "aborted":
            run.call("abort", END_TXN, 3, {"transactional_id": txn, **ident, "committed": False})
            _until_stable(run, topic)
        for isolation in (0, 1):
            _fetch(run, f"{step}: fetch isolation {isolation}", 12, topic, 0, isolation=isolation)
            run.call(
                f"{step}: list offsets isolation {isolation}",
                LIST_OFFSETS,
                9,
                {
                    "replica_id": -1,
                    "isolation_level": isolation,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                            ],
                        }
                    ],
                },
            )


DESCRIBE_CLUSTER, LIST_TRANSACTIONS = 60, 66


def producer_ids(run: Run) -> None:
    """InitProducerId at every version (idempotent; transactional with the epoch bump of
    KIP-360 from v3 and a wrong epoch), AddOffsetsToTxn and EndTxn at every version,
    DescribeTransactions and ListTransactions filtered by this producer id."""
    txn = run.topic("pids")
    _find_coordinator(run, "find txn", txn, 1)
    for v in range(6):
        run.until(
            f"idempotent v{v}",
            INIT_PRODUCER_ID,
            v,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    init = {
        "transactional_id": txn,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = run.until("transactional v0", INIT_PRODUCER_ID, 0, init)
    ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    for v in range(3, 6):
        pid = run.until(f"bump v{v}", INIT_PRODUCER_ID, v, {**init, **ident}, BUSY)
        ident = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    run.call(
        "wrong epoch",
        INIT_PRODUCER_ID,
        4,
        {**init, "producer_id": ident["producer_id"], "producer_epoch": 99},
    )
    group = run.topic("pids-group")
    for v in range(4):
        run.until(
            f"add offsets v{v}",
            ADD_OFFSETS_TO_TXN,
            v,
            {"transactional_id": txn, **ident, "group_id": group},
            BUSY,
        )
        run.call(
            f"end v{v}", END_TXN, v, {"transactional_id": txn, **ident, "committed": v % 2 == 0}
        )
    run.until(
        "describe transactions",
        DESCRIBE_TRANSACTIONS,
        0,
        {"transactional_ids": [txn]},
        frozenset({"PrepareCommit", "PrepareAbort"}),
        lambda a: a["transaction_states"][0]["transaction_state"],
    )
    run.call(
        "describe unknown transaction",
        DESCRIBE_TRANSACTIONS,
        0,
        {"transactional_ids": [run.topic("pids-unknown")]},
        view=_unmapped_ids,
    )
    for v in (0, 1):
        run.call(
            f"list transactions v{v}",
            LIST_TRANSACTIONS,
            v,
            {
                "state_filters": [],
                "producer_id_filters": [ident["producer_id"]],
                "duration_filter": -1,
            },
        )


def _unmapped_ids(answer: dict[str, Any]) -> dict[str, Any]:
    """DescribeTransactions with the producer id of each error entry compared as it is (the
    field's default, not an id)."""
    states = [
        t
        if t["error_code"] == "none"
        else {("default_producer_id" if k == "producer_id" else k): v for k, v in t.items()}
        for t in answer["transaction_states"]
    ]
    return {**answer, "transaction_states": states}


def cluster(run: Run) -> None:
    """DescribeCluster v0 and v1, Metadata v1-v3 creating a topic (auto-creation is implied
    before v4), InvalidRecord: a keyless record on a compacted topic."""
    for v in (0, 1):
        run.call(
            f"describe cluster v{v}",
            DESCRIBE_CLUSTER,
            v,
            {"include_cluster_authorized_operations": False, "endpoint_type": 1},
        )
    for v in (1, 3):
        created = run.topic(f"cluster-auto-{v}")
        run.call(f"metadata v{v} auto-create", METADATA, v, _metadata_request([created], True))
        run.wait_ready(created, 1)
    compacted = run.topic("cluster-compacted")
    run.create(compacted, configs={"cleanup.policy": "compact"})
    keyless = MemoryRecordsBuilder(0)
    keyless.append_record(Record(0, BASE_TIMESTAMP, b"k", b"v"))
    keyless.append_record(Record(1, BASE_TIMESTAMP, None, b"no key"))
    for v in (3, 8, 11):
        _produce(run, f"keyless v{v}", v, compacted, keyless.build())


DESCRIBE_USER_SCRAM_CREDENTIALS = 50


def empty_and_unknown(run: Run) -> None:
    """An empty partition (ListOffsets of each kind, Fetch at 0 and 1), OffsetCommit to an
    unknown topic and partition, OffsetFetch of every topic (null) and of an unknown group,
    DescribeUserScramCredentials of all users and an unknown one."""
    topic, group = run.topic("empty"), run.topic("empty-group")
    run.create(topic, 2)
    for name, ts in (("earliest", -2), ("latest", -1), ("timestamp", 0), ("max", -3)):
        run.call(
            f"list offsets {name}",
            LIST_OFFSETS,
            9,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                        ],
                    }
                ],
            },
        )
    for offset in (0, 1):
        _fetch(run, f"fetch {offset}", 12, topic, offset)
    _find_coordinator(run, "find group", group, 0)
    run.until("commit", OFFSET_COMMIT, 8, _commit(group, -1, "", topic, 4), error=_committed_error)
    run.call(
        "commit unknown topic",
        OFFSET_COMMIT,
        8,
        _commit(group, -1, "", run.topic("empty-unknown"), 1),
    )
    run.call(
        "commit unknown partition",
        OFFSET_COMMIT,
        8,
        {
            **_commit(group, -1, "", topic, 1),
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 7,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        },
    )
    for v in (7, 8):
        run.call(
            f"fetch all topics v{v}",
            OFFSET_FETCH,
            v,
            {
                "group_id": group,
                "topics": None,
                "require_stable": True,
                "groups": [
                    {"group_id": group, "topics": None},
                    {"group_id": run.topic("empty-nogroup"), "topics": None},
                ],
            },
        )
    run.call("scram users, all", DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    run.call(
        "scram users, unknown",
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        {"users": [{"name": run.topic("nobody")}]},
    )


def group_errors(run: Run) -> None:
    """The group APIs' errors: a session timeout out of range, an empty group id, an unknown
    member id joining, another protocol type, SyncGroup and LeaveGroup of an unknown member,
    SyncGroup of a wrong generation, OffsetCommit with an empty group id, DescribeGroups and
    DeleteGroups of a group with members."""
    group, topic = run.topic("gerr"), run.topic("gerr-topic")
    run.create(topic)
    _find_coordinator(run, "find group", group, 0)
    run.call(
        "session timeout too small",
        JOIN_GROUP,
        9,
        {**_join(group, "", topic), "session_timeout": 10},
    )
    run.call(
        "session timeout too large",
        JOIN_GROUP,
        9,
        {**_join(group, "", topic), "session_timeout": 2_000_000_000},
    )
    run.call("empty group id", JOIN_GROUP, 9, _join("", "", topic))
    run.call("unknown member joins", JOIN_GROUP, 9, _join(group, "nobody", topic))
    first = run.call("join (no id)", JOIN_GROUP, 9, _join(group, "", topic))
    member = first["member_id"]
    joined = run.call("join", JOIN_GROUP, 9, _join(group, member, topic))
    gen = joined["generation_id"]
    run.call("sync unknown member", SYNC_GROUP, 5, _sync(group, gen, "nobody", []))
    run.call("sync wrong generation", SYNC_GROUP, 5, _sync(group, gen + 1, member, [member]))
    run.call("sync", SYNC_GROUP, 5, _sync(group, gen, member, [member]))
    run.call(
        "other protocol type",
        JOIN_GROUP,
        9,
        {**_join(group, "", topic), "protocol_type": "connect"},
    )
    run.call("commit empty group id", OFFSET_COMMIT, 8, _commit("", -1, "", topic, 1))
    run.call(
        "describe", DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
    )
    run.call("delete a group with members", DELETE_GROUPS, 2, {"groups_names": [group]})
    run.call(
        "leave unknown member",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": "nobody", "group_instance_id": None, "reason": None}],
        },
    )
    run.call(
        "leave",
        LEAVE_GROUP,
        5,
        {
            "group_id": group,
            "members": [{"member_id": member, "group_instance_id": None, "reason": None}],
        },
    )
    run.call("delete the empty group", DELETE_GROUPS, 2, {"groups_names": [group]})


SCENARIOS: dict[str, Scenario] = {
    "api_versions": api_versions,
    "metadata": metadata,
    "create_topics": create_topics,
    "produce_codecs": produce_codecs,
    "produce_errors": produce_errors,
    "produce_idempotent": produce_idempotent,
    "fetch_edges": fetch_edges,
    "list_offsets": list_offsets,
    "describe_configs": describe_configs,
    "delete_records": delete_records,
    "groups": groups,
    "transactions": transactions,
    "fetch_sessions": fetch_sessions,
    "fetch_epochs": fetch_epochs,
    "offsets_stable": offsets_stable,
    "admin": admin,
    "group_versions": group_versions,
    "static_members": static_members,
    "open_transaction": open_transaction,
    "producer_ids": producer_ids,
    "cluster": cluster,
    "empty_and_unknown": empty_and_unknown,
    "group_errors": group_errors,
}
