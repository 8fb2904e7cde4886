"""The authorization matrix: every API the server serves (its ApiVersions table) x an allowed
principal (alice: All on the matrix's topics, groups, transactional id and the Cluster) and a
denied one (bob: no ACL), each answer's code asserted exactly; then the filtering APIs with a
principal allowed part of what it asks (carol).

One served broker for the module (SASL_PLAINTEXT, SCRAM users); raw kio frames over the test
wire client, one connection per user.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3 import request as apt
from kio.schema.alter_configs.v2 import request as ac
from kio.schema.alter_user_scram_credentials.v0 import request as aus
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_acls.v3 import request as ca
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.delete_acls.v3 import request as da
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2 import request as dr
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4 import request as dld
from kio.schema.describe_producers.v0 import request as dp
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_user_scram_credentials.v0 import request as dus
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fe
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v5 import request as jg
from kio.schema.leave_group.v3 import request as lg
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v10 import request as md10
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_delete.v0 import request as od
from kio.schema.offset_fetch.v7 import request as of
from kio.schema.produce.v9 import request as pr
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sync_group.v3.request import SyncGroupRequest
from kio.schema.txn_offset_commit.v3 import request as to
from kio.schema.write_txn_markers.v1 import request as wtm
from kio.static.primitive import i8, i16, i32, i64

from broker_embedded.error_code import ErrorCode as TableCode
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.security.authorizer import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.broker_embedded.server._net import request_frame
from tests.broker_embedded.server._pki import Pki
from tests.broker_embedded.server._pki import pki_fixture as pki_fixture  # noqa: F401
from tests.broker_embedded.server._serve import decode_response
from tests.broker_embedded.server.test_authorization import (  # noqa: F401 (log_dir: a fixture)
    Acls,
    admin_options,
    allow,
    authorized,
    batch,
    create_topic,
    log_dir_fixture,
    login,
    secured,
)
from tests.broker_embedded.server.test_security import Wire

E, Op, T = ErrorCode, AclOperation, ResourceType
FIVE = timedelta(seconds=5)
TOPIC, DELETED, GROUP, OTHER_GROUP, TXN = "mx", "mx-del", "mxg", "zz-group", "mx-txn"
TOPIC_OPS = sum(
    1 << op
    for op in (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    )
)
CLUSTER_OPS = sum(
    1 << op
    for op in (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    )
)


def call(wire: Wire, request: Any) -> Any:
    """Send a kio request; its decoded response (the schema of the same key and version; an
    ApiVersions response header is always v0)."""
    schema = load_response_schema(request.__api_key__, request.__version__)
    wire.sock.sendall(request_frame(request, 1))
    return decode_response(schema, wire.frame(), schema.__flexible__ and request.__api_key__ != 18)


# --- the module's server and ACLs ------------------------------------------------------------


@pytest.fixture(scope="module", name="server")
def server_fixture(pki: Pki, log_dir: Path) -> Iterator[BrokerServer]:
    with authorized(log_dir, secured(pki)) as s:
        _populate(s)
        Acls(log_dir, refresh_ms=0).add(
            [
                allow("User:alice", Op.ALL, TOPIC),
                allow("User:alice", Op.ALL, "mx-", pattern=PatternType.PREFIXED),
                allow("User:alice", Op.ALL, GROUP, T.GROUP, PatternType.PREFIXED),
                allow("User:alice", Op.ALL, "kafka-cluster", T.CLUSTER),
                allow("User:alice", Op.ALL, TXN, T.TRANSACTIONAL_ID),
                allow("User:carol", Op.DESCRIBE, GROUP, T.GROUP),
                allow("User:carol", Op.DELETE, GROUP, T.GROUP),
                allow("User:carol", Op.DESCRIBE, TOPIC),
                allow("User:carol", Op.DESCRIBE_CONFIGS, TOPIC),
                allow("User:carol", Op.DESCRIBE, TXN, T.TRANSACTIONAL_ID),
            ]
        )
        yield s


def _populate(server: BrokerServer) -> None:
    """As the super user: the topics, a record, the committed offsets of two groups and an
    open transaction, so each API has something to show or refuse."""
    for topic in (TOPIC, DELETED):
        create_topic(server, topic)
    admin = login(server, "admin")
    assert _code(call(admin, _produce(TOPIC))) == E.none
    for group in (GROUP, OTHER_GROUP):
        assert _code(call(admin, _offset_commit(group, (TOPIC, DELETED)))) == E.none
    txn = InitProducerIdRequest(
        transactional_id=TXN,
        transaction_timeout=timedelta(minutes=1),
        producer_id=i64(-1),
        producer_epoch=i16(-1),
    )
    for _ in range(100):  # COORDINATOR_NOT_AVAILABLE while __transaction_state is created
        code = call(admin, txn).error_code
        if code != E.coordinator_not_available:
            break
        time.sleep(0.1)
    assert code == E.none
    producer = call(admin, txn)
    begin = apt.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN,
        v3_and_below_producer_id=producer.producer_id,
        v3_and_below_producer_epoch=producer.producer_epoch,
        v3_and_below_topics=(
            apt.AddPartitionsToTxnTopic(name=TOPIC, partitions=(i32(0),)),
            apt.AddPartitionsToTxnTopic(name=DELETED, partitions=(i32(0),)),
        ),
    )
    added = call(admin, begin).results_by_topic_v3_and_below
    assert [p.partition_error_code for t in added for p in t.results_by_partition] == [0, 0]


def _code(response: Any) -> int:
    """The first error code of a response with nested results (Produce, OffsetCommit)."""
    topic = (getattr(response, "responses", None) or response.topics)[0]
    partition = (getattr(topic, "partition_responses", None) or topic.partitions)[0]
    return partition.error_code


def _produce(topic: str) -> Any:
    return pr.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=FIVE,
        topic_data=(
            pr.TopicProduceData(
                name=topic,
                partition_data=(pr.PartitionProduceData(index=i32(0), records=batch(b"mx")),),
            ),
        ),
    )


def _offset_commit(group: str, topics: tuple[str, ...]) -> Any:
    return oc.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=tuple(
            oc.OffsetCommitRequestTopic(
                name=t,
                partitions=(
                    oc.OffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(1),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            )
            for t in topics
        ),
    )


def _offset_fetch(group: str, topics: tuple[str, ...] | None) -> Any:
    asked = (
        None
        if topics is None
        else tuple(of.OffsetFetchRequestTopic(name=t, partition_indexes=(i32(0),)) for t in topics)
    )
    return of.OffsetFetchRequest(group_id=group, topics=asked, require_stable=False)


# --- the matrix: API key -> (request, what to read, alice's answer, bob's answer) -------------

Row = tuple[Callable[[], Any], Callable[[Any], Any], Any, Any]


def _first(field: str) -> Callable[[Any], Any]:
    """Reads ``response.<field>[0].error_code``."""
    return lambda r: getattr(r, field)[0].error_code


def _top(r: Any) -> Any:
    return r.error_code


def _partition0(r: Any) -> Any:
    return r.topics[0].partitions[0].error_code


def _acl_filter(cls: type) -> Any:
    return cls(
        resource_type_filter=i8(T.TOPIC),
        resource_name_filter="zz-unused",
        pattern_type_filter=i8(PatternType.LITERAL),
        principal_filter="User:nobody",
        host_filter=None,
        operation=i8(Op.ANY),
        permission_type=i8(AclPermissionType.ANY),
    )


def _fetch() -> Any:
    return fe.FetchRequest(
        replica_id=i32(-1),
        max_wait=timedelta(0),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        rack_id="",
        forgotten_topics_data=(),
        topics=(
            fe.FetchTopic(
                topic=TOPIC,
                partitions=(
                    fe.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
    )


MATRIX: dict[int, Row] = {
    0: (lambda: _produce(TOPIC), _code, E.none, E.topic_authorization_failed),
    1: (
        _fetch,
        lambda r: r.responses[0].partitions[0].error_code,
        E.none,
        E.topic_authorization_failed,
    ),
    2: (
        lambda: lo.ListOffsetsRequest(
            replica_id=i32(-1),
            isolation_level=i8(0),
            topics=(
                lo.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        lo.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),
                    ),
                ),
            ),
        ),
        _partition0,
        E.none,
        E.topic_authorization_failed,
    ),
    3: (
        lambda: MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        ),
        lambda r: (r.topics[0].error_code, r.topics[0].topic_authorized_operations),
        (E.none, TOPIC_OPS),
        (E.topic_authorization_failed, -(2**31)),
    ),
    8: (lambda: _offset_commit(GROUP, (TOPIC,)), _code, E.none, E.group_authorization_failed),
    9: (lambda: _offset_fetch(GROUP, None), _top, E.none, E.group_authorization_failed),
    10: (
        lambda: FindCoordinatorRequest(key=GROUP, key_type=i8(0)),
        _top,
        E.none,
        E.group_authorization_failed,
    ),
    11: (
        lambda: jg.JoinGroupRequest(
            group_id=GROUP,
            session_timeout=timedelta(seconds=10),
            rebalance_timeout=timedelta(seconds=10),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(jg.JoinGroupRequestProtocol(name="range", metadata=b""),),
        ),
        _top,
        E.member_id_required,
        E.group_authorization_failed,
    ),
    12: (
        lambda: HeartbeatRequest(
            group_id=GROUP, generation_id=i32(1), member_id="m", group_instance_id=None
        ),
        _top,
        E.unknown_member_id,
        E.group_authorization_failed,
    ),
    13: (
        lambda: lg.LeaveGroupRequest(
            group_id=GROUP, members=(lg.MemberIdentity(member_id="m", group_instance_id=None),)
        ),
        lambda r: (r.error_code, tuple(m.error_code for m in r.members)),
        (E.none, (E.unknown_member_id,)),
        (E.group_authorization_failed, ()),
    ),
    14: (
        lambda: SyncGroupRequest(
            group_id=GROUP,
            generation_id=i32(1),
            member_id="m",
            group_instance_id=None,
            assignments=(),
        ),
        _top,
        E.unknown_member_id,
        E.group_authorization_failed,
    ),
    15: (
        lambda: DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=True),
        lambda r: (r.groups[0].error_code, r.groups[0].authorized_operations),
        (
            E.none,
            sum(
                1 << op
                for op in (Op.READ, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
            ),
        ),
        (E.group_authorization_failed, -(2**31)),
    ),
    16: (
        lambda: ListGroupsRequest(states_filter=()),
        lambda r: (r.error_code, sorted(g.group_id for g in r.groups)),
        (E.none, [GROUP, OTHER_GROUP]),
        (E.none, []),
    ),
    17: (
        lambda: SaslHandshakeRequest(mechanism="PLAIN"),
        _top,
        E.illegal_sasl_state,
        E.illegal_sasl_state,
    ),
    18: (
        lambda: ApiVersionsRequest(client_software_name="matrix", client_software_version="1"),
        _top,
        E.none,
        E.none,
    ),
    19: (
        lambda: ct.CreateTopicsRequest(
            timeout=FIVE,
            validate_only=True,
            topics=(
                ct.CreatableTopic(
                    name="mx-" + uuid.uuid4().hex[:6],
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(),
                ),
            ),
        ),
        _first("topics"),
        E.none,
        E.topic_authorization_failed,
    ),
    20: (
        lambda: DeleteTopicsRequest(topic_names=("mx-absent",), timeout=FIVE),
        _first("responses"),
        E.unknown_topic_or_partition,
        E.topic_authorization_failed,
    ),
    21: (
        lambda: dr.DeleteRecordsRequest(
            timeout=FIVE,
            topics=(
                dr.DeleteRecordsTopic(
                    name=DELETED,
                    partitions=(dr.DeleteRecordsPartition(partition_index=i32(0), offset=i64(0)),),
                ),
            ),
        ),
        _partition0,
        E.none,
        E.topic_authorization_failed,
    ),
    22: (
        lambda: InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=FIVE,
            producer_id=i64(-1),
            producer_epoch=i16(-1),
        ),
        _top,
        E.none,
        E.cluster_authorization_failed,
    ),
    24: (
        lambda: apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TXN,
            v3_and_below_producer_id=i64(7),
            v3_and_below_producer_epoch=i16(0),
            v3_and_below_topics=(apt.AddPartitionsToTxnTopic(name=TOPIC, partitions=(i32(0),)),),
        ),
        lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        E.invalid_producer_id_mapping,
        E.transactional_id_authorization_failed,
    ),
    25: (
        lambda: AddOffsetsToTxnRequest(
            transactional_id=TXN, producer_id=i64(7), producer_epoch=i16(0), group_id=GROUP
        ),
        _top,
        E.invalid_producer_id_mapping,
        E.transactional_id_authorization_failed,
    ),
    26: (
        lambda: EndTxnRequest(
            transactional_id=TXN, producer_id=i64(7), producer_epoch=i16(0), committed=True
        ),
        _top,
        E.invalid_producer_id_mapping,
        E.transactional_id_authorization_failed,
    ),
    27: (
        lambda: wtm.WriteTxnMarkersRequest(
            markers=(
                wtm.WritableTxnMarker(
                    producer_id=i64(7),
                    producer_epoch=i16(0),
                    transaction_result=False,
                    coordinator_epoch=i32(0),
                    topics=(
                        wtm.WritableTxnMarkerTopic(name="mx-absent", partition_indexes=(i32(0),)),
                    ),
                ),
            )
        ),
        lambda r: r.markers[0].topics[0].partitions[0].error_code,
        E.unknown_topic_or_partition,
        E.cluster_authorization_failed,
    ),
    28: (
        lambda: to.TxnOffsetCommitRequest(
            transactional_id=TXN,
            group_id=GROUP,
            producer_id=i64(7),
            producer_epoch=i16(0),
            generation_id=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                to.TxnOffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        to.TxnOffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(1),
                            committed_leader_epoch=i32(-1),
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        ),
        _partition0,
        E.invalid_producer_id_mapping,
        E.transactional_id_authorization_failed,
    ),
    29: (
        lambda: DescribeAclsRequest(
            resource_type_filter=i8(T.TOPIC),
            resource_name_filter="zz-unused",
            pattern_type_filter=i8(PatternType.ANY),
            principal_filter=None,
            host_filter=None,
            operation=i8(Op.ANY),
            permission_type=i8(AclPermissionType.ANY),
        ),
        _top,
        E.none,
        E.cluster_authorization_failed,
    ),
    30: (
        lambda: ca.CreateAclsRequest(
            creations=(
                ca.AclCreation(
                    resource_type=i8(T.TOPIC),
                    resource_name="zz-unused",
                    resource_pattern_type=i8(PatternType.LITERAL),
                    principal="User:nobody",
                    host="*",
                    operation=i8(Op.READ),
                    permission_type=i8(AclPermissionType.ALLOW),
                ),
            )
        ),
        _first("results"),
        E.none,
        E.cluster_authorization_failed,
    ),
    31: (
        lambda: da.DeleteAclsRequest(filters=(_acl_filter(da.DeleteAclsFilter),)),
        _first("filter_results"),
        E.none,
        E.cluster_authorization_failed,
    ),
    32: (
        lambda: dc.DescribeConfigsRequest(
            include_synonyms=False,
            include_documentation=False,
            resources=(
                dc.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=TOPIC, configuration_keys=("retention.ms",)
                ),
                dc.DescribeConfigsResource(
                    resource_type=i8(4), resource_name="0", configuration_keys=("num.io.threads",)
                ),
            ),
        ),
        lambda r: [(x.resource_name, x.error_code, len(x.configs)) for x in r.results],
        [(TOPIC, E.none, 1), ("0", E.none, 1)],
        [(TOPIC, E.topic_authorization_failed, 0), ("0", E.cluster_authorization_failed, 0)],
    ),
    33: (
        lambda: ac.AlterConfigsRequest(
            validate_only=True,
            resources=(
                ac.AlterConfigsResource(
                    resource_type=i8(2),
                    resource_name=TOPIC,
                    configs=(ac.AlterableConfig(name="retention.ms", value="1000"),),
                ),
            ),
        ),
        _first("responses"),
        E.none,
        E.topic_authorization_failed,
    ),
    35: (
        lambda: dld.DescribeLogDirsRequest(
            topics=(dld.DescribableLogDirTopic(topic=TOPIC, partitions=(i32(0),)),)
        ),
        lambda r: (r.error_code, [[t.name for t in d.topics] for d in r.results]),
        (E.none, [[TOPIC]]),
        (E.cluster_authorization_failed, []),
    ),
    36: (
        lambda: SaslAuthenticateRequest(auth_bytes=b"\x00bob\x00bob-pw"),
        _top,
        E.illegal_sasl_state,
        E.illegal_sasl_state,
    ),
    37: (
        lambda: cp.CreatePartitionsRequest(
            timeout=FIVE,
            validate_only=True,
            topics=(cp.CreatePartitionsTopic(name=TOPIC, count=i32(1), assignments=None),),
        ),
        _first("results"),
        E.invalid_partitions,
        E.topic_authorization_failed,
    ),
    42: (
        lambda: DeleteGroupsRequest(groups_names=("mxg-absent",)),
        _first("results"),
        E.group_id_not_found,
        E.group_authorization_failed,
    ),
    44: (
        lambda: iac.IncrementalAlterConfigsRequest(
            validate_only=True,
            resources=(
                iac.AlterConfigsResource(
                    resource_type=i8(2),
                    resource_name=TOPIC,
                    configs=(
                        iac.AlterableConfig(
                            name="retention.ms", config_operation=i8(0), value="1000"
                        ),
                    ),
                ),
                iac.AlterConfigsResource(resource_type=i8(4), resource_name="0", configs=()),
            ),
        ),
        lambda r: [(x.resource_name, x.error_code) for x in r.responses],
        [(TOPIC, E.none), ("0", E.invalid_request)],
        [(TOPIC, E.topic_authorization_failed), ("0", E.cluster_authorization_failed)],
    ),
    47: (
        lambda: od.OffsetDeleteRequest(
            group_id=GROUP,
            topics=(
                od.OffsetDeleteRequestTopic(
                    name="mx-absent",
                    partitions=(od.OffsetDeleteRequestPartition(partition_index=i32(0)),),
                ),
            ),
        ),
        _top,
        E.none,
        E.group_authorization_failed,
    ),
    50: (
        lambda: dus.DescribeUserScramCredentialsRequest(users=None),
        _first("results"),
        E.none,
        E.cluster_authorization_failed,
    ),
    51: (
        lambda: aus.AlterUserScramCredentialsRequest(
            upsertions=(), deletions=(aus.ScramCredentialDeletion(name="nobody", mechanism=i8(1)),)
        ),
        _first("results"),
        E.resource_not_found,
        E.cluster_authorization_failed,
    ),
    60: (
        lambda: DescribeClusterRequest(
            include_cluster_authorized_operations=True, endpoint_type=i8(1)
        ),
        lambda r: (r.error_code, len(r.brokers), r.cluster_authorized_operations),
        (E.none, 1, CLUSTER_OPS),
        (E.none, 1, 0),
    ),
    61: (
        lambda: dp.DescribeProducersRequest(
            topics=(dp.TopicRequest(name=TOPIC, partition_indexes=(i32(0),)),)
        ),
        _partition0,
        E.none,
        E.topic_authorization_failed,
    ),
    65: (
        lambda: DescribeTransactionsRequest(transactional_ids=(TXN,)),
        _first("transaction_states"),
        E.none,
        E.transactional_id_authorization_failed,
    ),
    66: (
        lambda: ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=i64(-1)
        ),
        lambda r: (r.error_code, [s.transactional_id for s in r.transaction_states]),
        (E.none, [TXN]),
        (E.none, []),
    ),
}


def test_the_matrix_covers_every_served_api(server):
    served = {r.api_key for r in server.versions.ranges()}
    assert set(MATRIX) == served


@pytest.mark.parametrize("user", ["alice", "bob"])
@pytest.mark.parametrize("api_key", sorted(MATRIX))
def test_matrix(server, api_key, user):
    build, read, allowed, denied = MATRIX[api_key]
    assert read(call(login(server, user), build())) == (allowed if user == "alice" else denied)


# --- part of what is asked: carol may Describe group mxg, topic mx and the transactional id --


def _offsets(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.committed_offset, p.error_code) for t in response.topics for p in t.partitions
    ]


def test_offset_fetch_refuses_or_leaves_out_topics_without_describe(server):
    carol = login(server, "carol")
    every = call(carol, _offset_fetch(GROUP, None))
    assert (every.error_code, _offsets(every)) == (E.none, [(TOPIC, 1, E.none)])
    asked = call(carol, _offset_fetch(GROUP, (DELETED, TOPIC)))
    assert _offsets(asked) == [(TOPIC, 1, E.none), (DELETED, -1, E.topic_authorization_failed)]
    admin = call(login(server, "admin"), _offset_fetch(GROUP, None))
    assert _offsets(admin) == [(TOPIC, 1, E.none), (DELETED, 1, E.none)]


def test_list_groups_lists_describable_groups_or_every_one_with_cluster_describe(server):
    def groups(user: str) -> list[str]:
        response = call(login(server, user), ListGroupsRequest(states_filter=()))
        return sorted(g.group_id for g in response.groups)

    assert groups("carol") == [GROUP]
    assert groups("alice") == [GROUP, OTHER_GROUP]  # Describe on the Cluster (All)
    assert groups("bob") == []


def test_describe_configs_answers_each_resource_allowed_first(server):
    resources = tuple(
        dc.DescribeConfigsResource(
            resource_type=i8(t), resource_name=n, configuration_keys=("retention.ms",)
        )
        for t, n in ((2, DELETED), (4, "0"), (2, TOPIC))
    )
    request = dc.DescribeConfigsRequest(
        resources=resources, include_synonyms=False, include_documentation=False
    )
    results = call(login(server, "carol"), request).results
    assert [(r.resource_name, r.error_code, len(r.configs)) for r in results] == [
        (TOPIC, E.none, 1),
        (DELETED, E.topic_authorization_failed, 0),
        ("0", E.cluster_authorization_failed, 0),
    ]


def test_describe_transactions_lists_only_describable_topics(server):
    request = DescribeTransactionsRequest(transactional_ids=(TXN,))

    def topics(user: str) -> list[str]:
        (state,) = call(login(server, user), request).transaction_states
        assert state.error_code == E.none
        return [t.topic for t in state.topics]

    assert topics("alice") == [TOPIC, DELETED]
    assert topics("carol") == [TOPIC]


def _earliest(wire: Wire, topic: str) -> int:
    request = lo.ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            lo.ListOffsetsTopic(
                name=topic,
                partitions=(lo.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-2)),),
            ),
        ),
    )
    return call(wire, request).topics[0].partitions[0].offset


def test_refused_deletions_change_nothing(server):
    bob, carol, admin = login(server, "bob"), login(server, "carol"), login(server, "admin")
    records = dr.DeleteRecordsRequest(
        timeout=FIVE,
        topics=(
            dr.DeleteRecordsTopic(
                name=TOPIC,
                partitions=(dr.DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1)),),
            ),
        ),
    )
    assert _partition0(call(bob, records)) == E.topic_authorization_failed
    assert _earliest(admin, TOPIC) == 0
    offsets = od.OffsetDeleteRequest(
        group_id=GROUP,
        topics=(
            od.OffsetDeleteRequestTopic(
                name=TOPIC, partitions=(od.OffsetDeleteRequestPartition(partition_index=i32(0)),)
            ),
        ),
    )
    answer = call(carol, offsets)  # Delete on the group, no Read on the topic
    assert (answer.error_code, _partition0(answer)) == (E.none, E.topic_authorization_failed)
    assert (TOPIC, 1, E.none) in _offsets(call(admin, _offset_fetch(GROUP, (TOPIC,))))


def test_metadata_v10_answers_the_cluster_and_topic_operations(server):
    request = md10.MetadataRequest(
        topics=(md10.MetadataRequestTopic(topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )

    def operations(user: str) -> tuple[int, int]:
        response = call(login(server, user), request)
        return response.cluster_authorized_operations, response.topics[
            0
        ].topic_authorized_operations

    assert operations("alice") == (CLUSTER_OPS, TOPIC_OPS)
    assert operations("carol") == (0, (1 << Op.DESCRIBE) | (1 << Op.DESCRIBE_CONFIGS))
    assert operations("bob") == (0, -(2**31))


# --- the messages of the errors answered ------------------------------------------------------


def _errors(message: Any, path: str = "") -> Iterator[tuple[str, int, Any]]:
    """(path, code, message) of every non-zero error code in a response with an error message
    field beside it (``...error_code`` with ``...error_message``)."""
    if dataclasses.is_dataclass(message):
        names = [f.name for f in dataclasses.fields(message)]
        code = next((n for n in names if n.endswith("error_code")), None)
        text = next((n for n in names if n.endswith("error_message")), None)
        if code is not None and text is not None and getattr(message, code) != 0:
            yield path, int(getattr(message, code)), getattr(message, text)
        for name in names:
            yield from _errors(getattr(message, name), f"{path}.{name}")
    elif isinstance(message, tuple):
        for i, item in enumerate(message):
            yield from _errors(item, f"{path}[{i}]")


# What Kafka 3.9 answers bob (no ACL) for the same requests, where the response has a message
# field, except where Kafka's answer is no use to a client: a null message (Produce,
# CreatePartitions) or one naming its internal request object ("Request Request(processor=0,
# ...) is not authorized.": the ACL APIs, AlterUserScramCredentials); there Kafka's default
# message for the code. DescribeUserScramCredentials: in the results, not at the top
# (security/scram_admin.py says why).
CLUSTER, TOPIC_DENIED = "Cluster authorization failed.", "Topic authorization failed."
KAFKAS_REFUSALS = {
    0: [(".responses[0].partition_responses[0]", 29, TOPIC_DENIED)],
    10: [("", 30, "Group authorization failed.")],
    19: [(".topics[0]", 29, "Authorization failed.")],
    20: [(".responses[0]", 29, TOPIC_DENIED)],
    29: [("", 31, CLUSTER)],
    30: [(".results[0]", 31, CLUSTER)],
    31: [(".filter_results[0]", 31, CLUSTER)],
    32: [(".results[0]", 29, TOPIC_DENIED), (".results[1]", 31, CLUSTER)],
    33: [(".responses[0]", 29, TOPIC_DENIED)],
    36: [("", 34, "SaslAuthenticate request received after successful authentication")],
    37: [(".results[0]", 29, TOPIC_DENIED)],
    44: [(".responses[0]", 29, TOPIC_DENIED), (".responses[1]", 31, CLUSTER)],
    50: [(".results[0]", 31, CLUSTER)],
    51: [(".results[0]", 31, CLUSTER)],
    61: [(".topics[0].partitions[0]", 29, TOPIC_DENIED)],
}


def test_refusals_carry_kafkas_messages(server):
    answered = {}
    for api_key, (build, *_) in MATRIX.items():
        errors = list(_errors(call(login(server, "bob"), build())))
        if errors:
            answered[api_key] = errors
    assert answered == KAFKAS_REFUSALS


@pytest.mark.parametrize("user", ["alice", "carol"])
def test_every_error_answered_carries_a_message(server, user):
    for api_key, (build, *_) in MATRIX.items():
        for path, code, message in _errors(call(login(server, user), build())):
            assert message, (api_key, path, code)


@pytest.mark.peer  # starts the peer itself
def test_the_default_messages_are_kafka_39s():
    """The table against Kafka's own ``Errors`` enum, printed by jshell from the peer's jars."""
    peers = os.environ.get("KAFKALOG_PEERS")
    if not peers or shutil.which("jshell") is None:
        pytest.skip("needs KAFKALOG_PEERS (a folder holding kafka-3.9/) and jshell (Java 17+)")
    script = (
        "for (var e : org.apache.kafka.common.protocol.Errors.values()) "
        'System.out.println(e.code() + "\\t" + e.message());\n/exit\n'
    )
    printed = subprocess.run(
        ["jshell", "-q", "--class-path", f"{peers}/kafka-3.9/libs/*", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    kafkas = dict(line.split("\t", 1) for line in printed.splitlines() if "\t" in line)
    assert {int(c): m for c, m in kafkas.items() if c != "0"} == {
        e.value: e.message for e in TableCode if e != TableCode.none and e.value <= 127
    }  # Kafka 3.9's codes end at 127 (VOTER_NOT_FOUND); the table holds kio's newer ones too


DESCRIBE_SCRAM = """
import sys
from confluent_kafka.admin import AdminClient
admin = AdminClient(dict(arg.split("=", 1) for arg in sys.argv[2:]))
for users in (None, ["alice", "bob"]):
    futures = admin.describe_user_scram_credentials(users)
    for user, future in ([(None, futures)] if users is None else sorted(futures.items())):
        try:
            print(user, future.result(float(sys.argv[1])))
        except Exception as e:
            print(user, e.args[0].name(), e.args[0].str())
"""


def test_a_refused_describe_user_scram_credentials_does_not_abort_confluent_kafka(server):
    """confluent-kafka 2.16 aborts its process on this refusal with a null message (in a child
    process: an abort fails the test, not pytest)."""
    options = [f"{k}={v}" for k, v in admin_options(server, "bob").items()]
    child = subprocess.run(
        [sys.executable, "-c", DESCRIBE_SCRAM, "30", *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (child.returncode, child.stderr[-300:]) == (0, "")
    # librdkafka reads a user's message up to the next NUL byte, past its end: the "\x01" is
    # the count of the empty credential list that follows it on the wire (then a 0 tag byte)
    assert child.stdout.splitlines() == [
        f"None CLUSTER_AUTHORIZATION_FAILED {CLUSTER}\x01",
        f"alice CLUSTER_AUTHORIZATION_FAILED {CLUSTER}\x01",
        f"bob CLUSTER_AUTHORIZATION_FAILED {CLUSTER}\x01",
    ]
