"""Authorization over loopback: a server with ``authorizer.class.name`` set, SCRAM users
(admin is a super user, alice, bob and carol are not), ACLs made with confluent-kafka's
AdminClient and checked with real clients and raw kio frames for the exact codes. The matrix
over every API is test_authorization_matrix.py."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOp
from confluent_kafka.admin import AclPermissionType as CkPerm
from confluent_kafka.admin import AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as CkType
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_acls.v3.response import DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.static.primitive import i8, i32, i64

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import build_batch
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from broker_embedded.server.security.authorizer import (
    REFRESH_MS,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_embedded.server.security.security_config import SecurityConfig
from tests.broker_embedded.server._net import config
from tests.broker_embedded.server._pki import Pki, add_user, port
from tests.broker_embedded.server._pki import pki_fixture as pki_fixture  # noqa: F401
from tests.broker_embedded.server._pki import security as pki_security
from tests.broker_embedded.server.test_security import TIMEOUT_S, Wire, scram

LISTENERS = ["SASL_PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0"]
USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
Op, T = AclOperation, ResourceType


@contextlib.contextmanager
def authorized(log_dir: Path, sec: SecurityConfig) -> Iterator[BrokerServer]:
    broker = Broker(log_dir, create=True, config=config())
    for user, password in USERS.items():
        add_user(log_dir, user, password)
    server = broker_server(broker, LISTENERS, security=sec).start()
    try:
        yield server
    finally:
        server.shutdown(5.0)
        broker.close()


def secured(pki: Pki, **overrides: object) -> SecurityConfig:
    values = {"authorizer_class_name": AUTHORIZER, "super_users": "User:admin", **overrides}
    return pki_security(pki, **values)


@pytest.fixture(scope="module", name="log_dir")
def log_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("log")


@pytest.fixture(scope="module", name="server")
def server_fixture(pki: Pki, log_dir: Path) -> Iterator[BrokerServer]:
    with authorized(log_dir, secured(pki)) as s:
        yield s


class Acls(AclStore):
    """The server's ACLs, as `kafkalog acls --log-dir` writes them; an addition waits until the
    server has read the file again."""

    def add(self, bindings) -> None:
        super().add(bindings)
        settle()


def settle() -> None:
    time.sleep(REFRESH_MS * 1.5 / 1000)


@pytest.fixture(name="acls")
def acls_fixture(log_dir: Path) -> AclStore:
    return Acls(log_dir, refresh_ms=0)


def login(server: BrokerServer, user: str) -> Wire:
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    assert scram(wire, "SCRAM-SHA-256", user, USERS[user]).error_code == ErrorCode.none
    return wire


def allow(
    principal: str,
    op: AclOperation,
    name: str,
    rtype: ResourceType = T.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, permission)
    )


def create_topic(server: BrokerServer, topic: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient(admin_options(server, "admin"))
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(TIMEOUT_S)


def admin_options(server: BrokerServer, user: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{port(server, 'SASL_PLAINTEXT')}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def batch(value: bytes) -> bytes:
    return build_batch([value], now_ms=int(time.time() * 1000))


# --- ACL APIs over the protocol --------------------------------------------------------------


def test_confluent_admin_creates_describes_and_deletes_acls(server):
    admin = AdminClient(admin_options(server, "admin"))
    bindings = [
        CkBinding(
            CkType.TOPIC,
            "ck-",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            CkOp.READ,
            CkPerm.ALLOW,
        ),
        CkBinding(
            CkType.GROUP,
            "ck-group",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            CkOp.READ,
            CkPerm.ALLOW,
        ),
    ]
    for future in admin.create_acls(bindings).values():
        assert future.result(TIMEOUT_S) is None
    match = CkFilter(
        CkType.TOPIC, "ck-orders", ResourcePatternType.MATCH, None, None, CkOp.ANY, CkPerm.ANY
    )
    described = admin.describe_acls(match).result(TIMEOUT_S)
    assert described == [bindings[0]]
    everything = CkFilter(
        CkType.ANY, None, ResourcePatternType.ANY, "User:alice", None, CkOp.ANY, CkPerm.ANY
    )
    assert sorted(admin.describe_acls(everything).result(TIMEOUT_S)) == sorted(bindings)
    deleted = admin.delete_acls([everything])[everything].result(TIMEOUT_S)
    assert sorted(deleted) == sorted(bindings)
    assert admin.describe_acls(everything).result(TIMEOUT_S) == []


def test_acl_apis_need_alter_or_describe_on_the_cluster(server, acls):
    admin = AdminClient(admin_options(server, "bob"))
    binding = CkBinding(
        CkType.TOPIC, "x", ResourcePatternType.LITERAL, "User:bob", "*", CkOp.READ, CkPerm.ALLOW
    )
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        admin.create_acls([binding])[binding].result(TIMEOUT_S)
    every = CkFilter(CkType.ANY, None, ResourcePatternType.ANY, None, None, CkOp.ANY, CkPerm.ANY)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        admin.delete_acls([every])[every].result(TIMEOUT_S)
    # librdkafka answers a DescribeAcls refused at the top level with an empty list: raw frames
    raw = DescribeAclsRequest(
        resource_type_filter=i8(T.ANY),
        resource_name_filter=None,
        pattern_type_filter=i8(PatternType.ANY),
        principal_filter=None,
        host_filter=None,
        operation=i8(Op.ANY),
        permission_type=i8(AclPermissionType.ANY),
    )
    answer = login(server, "bob").call(raw, DescribeAclsResponse)
    assert (answer.error_code, answer.resources) == (ErrorCode.cluster_authorization_failed, ())
    assert acls.acls() == ()


# --- Produce, Fetch, Metadata ----------------------------------------------------------------


def produce(wire: Wire, topic: str, value: bytes) -> int:
    request = ProduceRequest(
        transactional_id=None,
        acks=i8(-1),
        timeout=timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=i32(0), records=batch(value)),),
            ),
        ),
    )
    response = wire.call(request, ProduceResponse)
    return response.responses[0].partition_responses[0].error_code


def fetch(wire: Wire, topics: list[str]) -> dict[str, tuple[ErrorCode, bytes | None]]:
    request = FetchRequest(
        replica_id=i32(-1),
        max_wait=timedelta(0),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        rack_id="",
        forgotten_topics_data=(),
        topics=tuple(
            FetchTopic(
                topic=t,
                partitions=(
                    FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            )
            for t in topics
        ),
    )
    response = wire.call(request, FetchResponse)
    return {
        t.topic: (t.partitions[0].error_code, t.partitions[0].records) for t in response.responses
    }


def test_produce_and_fetch_check_write_and_read(server, acls):
    topic = "pf-" + uuid.uuid4().hex[:6]
    create_topic(server, topic)
    acls.add([allow("User:alice", Op.WRITE, topic), allow("User:alice", Op.READ, topic)])
    alice, bob = login(server, "alice"), login(server, "bob")
    assert produce(bob, topic, b"from bob") == ErrorCode.topic_authorization_failed
    assert produce(alice, topic, b"from alice") == ErrorCode.none
    code, records = fetch(bob, [topic])[topic]
    assert (code, records) == (ErrorCode.topic_authorization_failed, b"")
    code, records = fetch(alice, [topic])[topic]
    assert code == ErrorCode.none and records is not None and b"from alice" in records
    assert b"from bob" not in records  # the denied producer wrote nothing


def test_metadata_lists_only_describable_topics(server, acls):
    mine, other = "md-" + uuid.uuid4().hex[:6], "md-" + uuid.uuid4().hex[:6]
    create_topic(server, mine)
    create_topic(server, other)
    acls.add([allow("User:alice", Op.READ, mine)])  # Read implies Describe
    alice = login(server, "alice")
    every = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    names = {t.name for t in alice.call(every, MetadataResponse).topics}
    assert mine in names and other not in names
    asked = MetadataRequest(
        topics=(
            MetadataRequestTopic(topic_id=None, name=other),
            MetadataRequestTopic(topic_id=None, name="md-missing"),
        ),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    codes = [t.error_code for t in alice.call(asked, MetadataResponse).topics]
    assert codes == [ErrorCode.topic_authorization_failed] * 2


def test_deny_beats_allow_and_prefixes_match(server, acls):
    topic = "dn-" + uuid.uuid4().hex[:6]
    create_topic(server, topic)
    acls.add(
        [
            allow("User:*", Op.WRITE, "dn-", pattern=PatternType.PREFIXED),
            allow("User:bob", Op.WRITE, topic, permission=AclPermissionType.DENY),
        ]
    )
    assert produce(login(server, "alice"), topic, b"a") == ErrorCode.none
    assert produce(login(server, "bob"), topic, b"b") == ErrorCode.topic_authorization_failed


def test_super_user_is_allowed_everything(server):
    topic = "su-" + uuid.uuid4().hex[:6]
    create_topic(server, topic)
    admin = login(server, "admin")
    assert produce(admin, topic, b"x") == ErrorCode.none
    assert fetch(admin, [topic])[topic][0] == ErrorCode.none


def test_allow_everyone_if_no_acl_found_and_restart(pki, tmp_path):
    sec = secured(pki, allow_everyone_if_no_acl_found=True)
    with authorized(tmp_path, sec) as server:
        create_topic(server, "open")
        create_topic(server, "closed")
        AclStore(tmp_path).add([allow("User:admin", Op.READ, "closed")])
        settle()
        assert produce(login(server, "bob"), "open", b"x") == ErrorCode.none
        assert produce(login(server, "bob"), "closed", b"x") == ErrorCode.topic_authorization_failed
    with authorized(tmp_path, secured(pki)) as server:  # the ACLs survive the restart
        assert AclStore(tmp_path).acls() == (allow("User:admin", Op.READ, "closed"),)
        assert produce(login(server, "bob"), "open", b"x") == ErrorCode.topic_authorization_failed


def test_kafka_python_over_sasl_ssl_with_acls(server, acls, pki):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kp-" + uuid.uuid4().hex[:6]
    create_topic(server, topic)
    acls.add([allow("User:alice", Op.WRITE, topic), allow("User:alice", Op.READ, topic)])
    options = {
        "bootstrap_servers": f"127.0.0.1:{port(server, 'SASL_SSL')}",
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    producer = KafkaProducer(**options)
    for i in range(10):
        producer.send(topic, b"v%d" % i).get(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(**options, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    values = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert values == [b"v%d" % i for i in range(10)]


# --- kafkalog acls ---------------------------------------------------------------------------

ADDED = (
    "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-, "
    "patternType=PREFIXED)`: \n"
    " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n\n"
)
LISTED = (
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-, "
    "patternType=PREFIXED)`: \n"
    " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n\n"
)
REMOVED = (
    "Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-, "
    "patternType=PREFIXED)`: \n"
    " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n\n"
)


def _acls_round(target: list[str], capsys) -> None:
    from spark_kafkalog import cli

    resource = ["--topic", "cli-", "--resource-pattern-type", "prefixed"]
    add = [
        "acls",
        "add",
        *target,
        *resource,
        "--operation",
        "Read",
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        "User:bob",
    ]
    assert cli.main(add) == 0
    assert capsys.readouterr().out == ADDED
    assert cli.main(["acls", "list", *target, *resource]) == 0
    assert capsys.readouterr().out == LISTED
    remove = ["acls", "remove", *target, *resource, "--allow-principal", "User:bob"]
    assert cli.main(remove) == 0
    assert capsys.readouterr().out == REMOVED
    assert cli.main(["acls", "remove", *target, *resource]) == 0
    assert capsys.readouterr().out == REMOVED.replace("bob", "alice")


def test_acls_command_on_a_log_dir(tmp_path, capsys):
    _acls_round(["--log-dir", str(tmp_path)], capsys)
    assert AclStore(tmp_path).acls() == ()


def test_acls_command_over_the_wire(server, acls, tmp_path, capsys):
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    bootstrap = f"127.0.0.1:{port(server, 'SASL_PLAINTEXT')}"
    _acls_round(["--bootstrap-server", bootstrap, "--command-config", str(props)], capsys)
    props.write_text(props.read_text().replace("admin", "bob"))
    from spark_kafkalog import cli

    code = cli.main(
        ["acls", "list", "--bootstrap-server", bootstrap, "--command-config", str(props)]
    )
    assert code == 1
    assert capsys.readouterr().err == (
        "kafkalog acls: DescribeAcls failed: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization "
        "failed.\n"
    )


# --- a broken ACL file -----------------------------------------------------------------------

BROKEN = {
    "not JSON": (b"{not json", "is not a valid ACL file (not JSON"),
    "wrong shape": (b'{"acls": [{"resource_type": "TOPIC"}]}', "is not a valid ACL file: KeyError"),
    "unreadable": (None, "cannot read the ACL file: Is a directory"),  # a directory
}


def _break(path: Path, content: bytes | None) -> None:
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_acl_file_stops_the_server_start_naming_it(pki, tmp_path, case):
    from broker_embedded.server.security.json_file import SecurityFileError

    content, message = BROKEN[case]
    _break(tmp_path / "acls.json", content)
    with Broker(tmp_path, create=True, config=config()) as broker:
        with pytest.raises(
            SecurityFileError,
            match=re.escape(f"{tmp_path / 'acls.json'}") + ".*" + re.escape(message),
        ):
            broker_server(broker, LISTENERS, security=secured(pki))


def test_kafkalog_serve_refuses_a_broken_acl_file_in_one_line(tmp_path, capsys):
    from spark_kafkalog import cli

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "acls.json").write_text("[1, 2")
    conf = tmp_path / "broker.toml"
    conf.write_text(f'[security]\n"authorizer.class.name" = "{AUTHORIZER}"\n')
    code = cli.main(
        [
            "serve",
            "--log-dir",
            str(tmp_path / "logs"),
            "--listeners",
            "PLAINTEXT://127.0.0.1:0",
            "--broker-config",
            str(conf),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(
        f"kafkalog serve: {tmp_path / 'logs' / 'acls.json'} is not a valid ACL file (not JSON: "
    )
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["acls.json"]  # not opened


def test_a_running_server_keeps_its_acls_when_the_file_breaks(pki, tmp_path, caplog):
    with authorized(tmp_path, secured(pki)) as server:
        create_topic(server, "kept")
        store = AclStore(tmp_path)
        store.add([allow("User:alice", Op.WRITE, "kept")])
        settle()
        alice, bob = login(server, "alice"), login(server, "bob")
        assert produce(alice, "kept", b"a") == ErrorCode.none  # the server reads the ACLs
        store.path.write_text("{broken")
        settle()
        assert produce(alice, "kept", b"a") == ErrorCode.none  # the ACLs read before hold
        assert produce(bob, "kept", b"b") == ErrorCode.topic_authorization_failed
        assert f"{store.path} is not a valid ACL file" in caplog.text
        store.path.unlink()
        store.add([allow("User:bob", Op.WRITE, "kept")])  # a good file again: it counts
        settle()
        assert produce(bob, "kept", b"b") == ErrorCode.none
        assert produce(alice, "kept", b"a") == ErrorCode.topic_authorization_failed
