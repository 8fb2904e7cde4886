"""The scenarios run on a SASL_PLAINTEXT listener with SCRAM-SHA-256 and Kafka's
StandardAuthorizer (no access without an ACL), by name: the SASL exchange, SCRAM credentials
(AlterUserScramCredentials 51, DescribeUserScramCredentials 50) and ACLs (CreateAcls 30,
DescribeAcls 29, DeleteAcls 31) with what they allow and refuse a user who is not a super user.

Each scenario's first connection authenticates as :data:`ADMIN` (a super user); the users it
makes are named after the run (``diff-alice-<token>``). Kafka applies credentials and ACLs
once its metadata log has them, a moment after answering: the scenarios wait for them (not
compared) before the steps that depend on them, as a client retries.
"""

from __future__ import annotations

import hashlib
from typing import Any

import scramp

from broker_embedded.client.client_security import SaslAuthenticationError
from tests.differential.harness import Connection
from tests.differential.scenario import Run, Scenario, batch

ADMIN = ("admin", "admin-secret")
PASSWORD = "pencil-42"
PRODUCE, METADATA, FIND_COORDINATOR, CREATE_TOPICS = 0, 3, 10, 19
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
ACL_VERSIONS = range(1, 4)  # kafkalog serves 1-3, Kafka 0-3
# Kafka's enums (AclOperation, AclPermissionType, ResourceType, PatternType, ScramMechanism)
ANY, TOPIC, GROUP, CLUSTER = 1, 2, 3, 4
MATCH, LITERAL, PREFIXED = 2, 3, 4
READ, WRITE, IDEMPOTENT_WRITE, ALL_OPS = 3, 4, 12, 2
DENY, ALLOW = 2, 3
SHA_256, SHA_512 = 1, 2


def sasl(run: Run) -> None:
    """SaslHandshake v0 and v1 asking a mechanism the listener does not enable and one it
    does; SaslAuthenticate with a wrong password (its first answer's salt and nonce masked)."""
    for v in (0, 1):
        run.call_on(
            f"handshake v{v} PLAIN", run.connect(), SASL_HANDSHAKE, v, {"mechanism": "PLAIN"}
        )
    conn = run.connect()
    run.call_on("handshake v1 SCRAM", conn, SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    client = scramp.ScramClient(["SCRAM-SHA-256"], ADMIN[0], "wrong")
    first = run.call_on(
        "authenticate, first",
        conn,
        SASL_AUTHENTICATE,
        2,
        {"auth_bytes": client.get_client_first().encode()},
    )
    client.set_server_first(first["auth_bytes"].decode())
    run.call_on(
        "authenticate, wrong proof",
        conn,
        SASL_AUTHENTICATE,
        2,
        {"auth_bytes": client.get_client_final().encode()},
    )


def scram_credentials(run: Run) -> None:
    """Upserts (two mechanisms), the errors (a user altered twice in one request, too few
    iterations, an unknown mechanism, an empty name, deleting what does not exist), describing
    users known and unknown, a login with the new credential, then a deletion."""
    bob, carol = run.topic("bob"), run.topic("carol")
    run.call(
        "alter, one user twice",
        ALTER_SCRAM,
        0,
        view=_by_user,
        values={
            "deletions": [],
            "upsertions": [_upsertion(bob, SHA_256, 4096), _upsertion(bob, SHA_512, 8192)],
        },
    )
    for mechanism, iterations in ((SHA_256, 4096), (SHA_512, 8192)):
        run.call(
            f"alter, mechanism {mechanism}",
            ALTER_SCRAM,
            0,
            view=_by_user,
            values={"deletions": [], "upsertions": [_upsertion(bob, mechanism, iterations)]},
        )
    run.call(
        "alter, errors",
        ALTER_SCRAM,
        0,
        view=_by_user,
        values={
            "deletions": [
                {"name": run.topic("nobody"), "mechanism": SHA_256},
                {"name": carol, "mechanism": SHA_256},
            ],
            "upsertions": [
                _upsertion(run.topic("few"), SHA_256, 1000),
                _upsertion(run.topic("unknown-mech"), 0, 4096),
                _upsertion("", SHA_256, 4096),
                _upsertion(carol, SHA_256, 4096),
            ],
        },
    )
    _wait_login(run, bob)
    run.call(
        "describe",
        DESCRIBE_SCRAM,
        0,
        view=_by_mechanism,
        values={"users": [{"name": bob}, {"name": run.topic("nobody")}]},
    )
    run.call(
        "describe, twice",
        DESCRIBE_SCRAM,
        0,
        view=_by_mechanism,
        values={"users": [{"name": bob}, {"name": bob}]},
    )
    run.call(
        "delete",
        ALTER_SCRAM,
        0,
        view=_by_user,
        values={"deletions": [{"name": bob, "mechanism": SHA_512}], "upsertions": []},
    )
    _wait_deleted(run, bob, SHA_512)
    run.call(
        "describe, deleted one",
        DESCRIBE_SCRAM,
        0,
        view=_by_mechanism,
        values={"users": [{"name": bob}]},
    )


def acls(run: Run) -> None:
    """ACLs created (literal, prefixed, group, cluster, a deny) and refused, described by
    filters, what they allow a user who is not a super user (Metadata with authorized
    operations, Produce, FindCoordinator, CreateTopics, DescribeAcls), then deleted."""
    alice = run.topic("alice")
    principal = f"User:{alice}"
    read_me, write_pre, denied = run.topic("read"), run.topic("pre"), run.topic("denied")
    group = run.topic("group")
    for topic in (read_me, f"{write_pre}-x", denied):
        run.create(topic)
    mine = [
        _acl(TOPIC, read_me, LITERAL, principal, READ, ALLOW),
        _acl(TOPIC, write_pre, PREFIXED, principal, WRITE, ALLOW),
        _acl(TOPIC, write_pre, PREFIXED, principal, READ, ALLOW),
        _acl(GROUP, group, LITERAL, principal, READ, ALLOW),
        _acl(CLUSTER, "kafka-cluster", LITERAL, principal, IDEMPOTENT_WRITE, ALLOW),
        _acl(TOPIC, denied, LITERAL, principal, ALL_OPS, DENY),
    ]
    run.call("create", CREATE_ACLS, 3, {"creations": mine})
    refused = {
        "type ANY": _acl(ANY, read_me, LITERAL, principal, READ, ALLOW),
        "pattern MATCH": _acl(TOPIC, read_me, MATCH, principal, READ, ALLOW),
        "operation ANY": _acl(TOPIC, read_me, LITERAL, principal, ANY, ALLOW),
        "permission ANY": _acl(TOPIC, read_me, LITERAL, principal, READ, ANY),
        "cluster name": _acl(CLUSTER, "not-the-cluster", LITERAL, principal, READ, ALLOW),
        "empty name": _acl(TOPIC, "", LITERAL, principal, READ, ALLOW),
    }
    for v in ACL_VERSIONS:  # one each: Kafka fails a whole request with an unexpected error
        for what, creation in refused.items():
            run.call(f"create v{v}, {what}", CREATE_ACLS, v, {"creations": [creation]})
    _wait_acls(run, principal, len(mine))
    for v in ACL_VERSIONS:
        run.call(
            f"describe v{v}, principal",
            DESCRIBE_ACLS,
            v,
            _filter(ANY, None, ANY, principal),
            view=_sorted_resources,
        )
        run.call(
            f"describe v{v}, match",
            DESCRIBE_ACLS,
            v,
            _filter(TOPIC, f"{write_pre}-x", MATCH, None),
            view=_sorted_resources,
        )
        run.call(
            f"describe v{v}, literal",
            DESCRIBE_ACLS,
            v,
            _filter(TOPIC, read_me, LITERAL, None),
            view=_sorted_resources,
        )
        run.call(
            f"describe v{v}, prefixed",
            DESCRIBE_ACLS,
            v,
            _filter(TOPIC, write_pre, PREFIXED, None),
            view=_sorted_resources,
        )
    _as_user(run, alice, read_me, write_pre, denied, group)
    for v in ACL_VERSIONS:
        run.call(
            f"delete v{v}",
            DELETE_ACLS,
            v,
            {
                "filters": [
                    {**_filter(TOPIC, write_pre, PREFIXED, principal), "operation": WRITE},
                    _filter(GROUP, run.topic("no-such-group"), LITERAL, None),
                ]
            },
        )
    _wait_acls(run, principal, len(mine) - 1)
    run.call(
        "describe after delete",
        DESCRIBE_ACLS,
        3,
        _filter(ANY, None, ANY, principal),
        view=_sorted_resources,
    )

    _kept_by_kafka(run, read_me)


def _kept_by_kafka(run: Run, topic: str) -> None:
    """ACLs Kafka 3.9 takes and kafkalog refuses: a principal without a type (after which
    Kafka's authorizer answers UNKNOWN_SERVER_ERROR to what it decides: last, and deleted at
    once) and an empty host."""
    odd = run.topic("odd")
    for v in ACL_VERSIONS:
        run.call(
            f"create v{v}, principal without type",
            CREATE_ACLS,
            v,
            {"creations": [_acl(TOPIC, topic, LITERAL, odd, READ, ALLOW)]},
        )
        run.call(
            f"create v{v}, empty host",
            CREATE_ACLS,
            v,
            {
                "creations": [
                    {**_acl(TOPIC, topic, LITERAL, f"User:{odd}", READ, ALLOW), "host": ""}
                ]
            },
        )
    kept = [_filter(TOPIC, topic, LITERAL, odd), _filter(TOPIC, topic, LITERAL, f"User:{odd}")]
    run.call("delete what Kafka kept", DELETE_ACLS, 3, {"filters": kept})


def _as_user(run: Run, user: str, read_me: str, write_pre: str, denied: str, group: str) -> None:
    """What ``user``'s ACLs allow it: Metadata of topics it may read, not see, or is denied
    (authorized operations too), producing where it may write and may not, its group's
    coordinator and another's, creating a topic, describing ACLs."""
    run.quiet(ALTER_SCRAM, 0, {"deletions": [], "upsertions": [_upsertion(user, SHA_256, 4096)]})
    conn = _wait_login(run, user)
    unseen = run.topic("unseen")
    run.create(unseen)
    for v in (8, 10, 12):
        run.call_on(
            f"metadata v{v} as user",
            conn,
            METADATA,
            v,
            {
                "topics": [
                    {"name": t, "topic_id": None}
                    for t in (read_me, f"{write_pre}-x", denied, unseen)
                ],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": v < 11,
                "include_topic_authorized_operations": True,
            },
        )
    for label, topic in (
        ("may write", f"{write_pre}-x"),
        ("read only", read_me),
        ("denied", denied),
    ):
        run.call_on(
            f"produce as user, {label}",
            conn,
            PRODUCE,
            9,
            {
                "acks": -1,
                "timeout": 30_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": batch([b"v"])}]}
                ],
            },
        )
    _wait_coordinator(run, group)
    for label, key in (("own group", group), ("other group", run.topic("other-group"))):
        run.call_on(
            f"find coordinator as user, {label}",
            conn,
            FIND_COORDINATOR,
            4,
            {"key_type": 0, "coordinator_keys": [key]},
        )
    run.call_on(
        "create topics as user",
        conn,
        CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": run.topic("by-user"),
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    run.call_on("describe acls as user", conn, DESCRIBE_ACLS, 3, _filter(ANY, None, ANY, None))


def _by_user(answer: dict[str, Any]) -> dict[str, Any]:
    """AlterUserScramCredentials' results by user (Kafka's come in its hash maps' order)."""
    return {**answer, "results": sorted(answer["results"], key=lambda r: r["user"])}


def _by_mechanism(answer: dict[str, Any]) -> dict[str, Any]:
    """DescribeUserScramCredentials' results by user, their credentials by mechanism (Kafka's
    come in hash maps' order, the mechanisms' changing from run to run)."""
    results = [
        {**r, "credential_infos": sorted(r["credential_infos"], key=lambda c: c["mechanism"])}
        for r in answer["results"]
    ]
    return {**answer, "results": sorted(results, key=lambda r: r["user"])}


def _upsertion(name: str, mechanism: int, iterations: int) -> dict[str, Any]:
    salt = hashlib.sha256(name.encode()).digest()[:16]  # the same on both servers
    salted = hashlib.pbkdf2_hmac(
        "sha512" if mechanism == SHA_512 else "sha256", PASSWORD.encode(), salt, iterations
    )
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted,
    }


def _acl(
    kind: int, name: str, pattern: int, principal: str, operation: int, permission: int
) -> dict[str, Any]:
    return {
        "resource_type": kind,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": operation,
        "permission_type": permission,
    }


def _filter(kind: int, name: str | None, pattern: int, principal: str | None) -> dict[str, Any]:
    return {
        "resource_type_filter": kind,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
    }


def _sorted_resources(answer: dict[str, Any]) -> dict[str, Any]:
    """DescribeAcls' resources and their ACLs in one order (neither server promises one)."""

    def key(entry: dict[str, Any]) -> str:
        return repr(sorted(entry.items(), key=lambda kv: kv[0]))

    resources = [{**r, "acls": sorted(r["acls"], key=key)} for r in answer["resources"]]
    return {**answer, "resources": sorted(resources, key=key)}


def _wait_acls(run: Run, principal: str, count: int) -> None:
    """Until DescribeAcls lists ``count`` ACLs of ``principal`` (not compared)."""

    def listed() -> bool | None:
        answer = run.quiet(DESCRIBE_ACLS, 3, _filter(ANY, None, ANY, principal))
        return sum(len(r["acls"]) for r in answer["resources"]) == count or None

    run.poll(f"ACLs of {principal} not {count}", listed)


def _wait_coordinator(run: Run, group: str) -> None:
    """Until FindCoordinator (as the super user) names ``group``'s coordinator: Kafka makes its
    offsets topic at the first lookup and answers COORDINATOR_NOT_AVAILABLE meanwhile."""
    request = {"key_type": 0, "coordinator_keys": [group]}

    def named() -> bool | None:
        answer = run.quiet(FIND_COORDINATOR, 4, request)
        return answer["coordinators"][0]["error_code"] == "none" or None

    run.poll(f"no coordinator for {group}", named)


def _wait_deleted(run: Run, user: str, mechanism: int) -> None:
    """Until the server no longer describes ``user``'s ``mechanism`` credential (not compared):
    Kafka applies a deletion when the controller's record reaches the broker, after its answer."""

    def gone() -> bool | None:
        answer = run.quiet(DESCRIBE_SCRAM, 0, {"users": [{"name": user}]})
        infos = [i for r in answer["results"] for i in r["credential_infos"]]
        return True if all(i["mechanism"] != mechanism for i in infos) else None

    run.poll(f"{user}'s credential {mechanism} still described", gone)


def _wait_login(run: Run, user: str) -> Connection:
    """A connection authenticated as ``user`` (with :data:`PASSWORD`), once the server knows
    the credential just upserted (not compared)."""

    def logged_in() -> Connection | None:
        try:
            return run.connect(login=(user, PASSWORD))
        except SaslAuthenticationError:
            return None

    return run.poll(f"{user} cannot log in", logged_in)


SECURED_SCENARIOS: dict[str, Scenario] = {
    "sasl": sasl,
    "scram_credentials": scram_credentials,
    "acls": acls,
}
