"""The authorizer's model (Kafka's AclAuthorizer decisions) and its ACL file in the log dir."""

from __future__ import annotations

import json

import pytest

from broker_embedded.server.security.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    AclStore,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)
from broker_embedded.server.security.security_config import SecurityConfig
from broker_embedded.storage.log_config import InvalidConfigError

Op = AclOperation
T = ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(
    principal: str,
    op: AclOperation,
    name: str = "orders",
    rtype: ResourceType = T.TOPIC,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission)
    )


def authorizer(tmp_path, *bindings: AclBinding, **kwargs: object) -> Authorizer:
    store = AclStore(tmp_path, refresh_ms=0)
    if bindings:
        store.add(bindings)
    return Authorizer(store, **kwargs)  # type: ignore[arg-type]


def test_literal_allow_and_default_deny(tmp_path) -> None:
    a = authorizer(tmp_path, acl("User:alice", Op.READ))
    assert a.authorize("User:alice", "10.0.0.1", Op.READ, T.TOPIC, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", Op.WRITE, T.TOPIC, "orders")
    assert not a.authorize("User:bob", "10.0.0.1", Op.READ, T.TOPIC, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", Op.READ, T.TOPIC, "orders2")


def test_deny_wins_over_allow(tmp_path) -> None:
    a = authorizer(tmp_path, acl("User:*", Op.ALL), acl("User:bob", Op.READ, permission=DENY))
    assert a.authorize("User:alice", "h", Op.READ, T.TOPIC, "orders")
    assert not a.authorize("User:bob", "h", Op.READ, T.TOPIC, "orders")
    assert a.authorize("User:bob", "h", Op.WRITE, T.TOPIC, "orders")


def test_prefixed_and_wildcard_patterns(tmp_path) -> None:
    a = authorizer(
        tmp_path,
        acl("User:alice", Op.WRITE, "orders-", pattern=PatternType.PREFIXED),
        acl("User:carol", Op.READ, "*"),
    )
    assert a.authorize("User:alice", "h", Op.WRITE, T.TOPIC, "orders-eu")
    assert not a.authorize("User:alice", "h", Op.WRITE, T.TOPIC, "order")
    assert a.authorize("User:carol", "h", Op.READ, T.TOPIC, "anything")
    assert not a.authorize("User:carol", "h", Op.READ, T.GROUP, "anything")


def test_implied_operations(tmp_path) -> None:
    a = authorizer(
        tmp_path,
        acl("User:w", Op.WRITE),
        acl("User:c", Op.ALTER_CONFIGS),
        acl("User:d", Op.DESCRIBE),
    )
    assert a.authorize("User:w", "h", Op.DESCRIBE, T.TOPIC, "orders")
    assert a.authorize("User:c", "h", Op.DESCRIBE_CONFIGS, T.TOPIC, "orders")
    assert not a.authorize("User:c", "h", Op.DESCRIBE, T.TOPIC, "orders")
    assert not a.authorize("User:d", "h", Op.READ, T.TOPIC, "orders")


def test_deny_of_read_does_not_deny_describe(tmp_path) -> None:
    """Kafka denies only the named operation (or All); Describe stays implied by Write."""
    a = authorizer(tmp_path, acl("User:a", Op.WRITE), acl("User:a", Op.READ, permission=DENY))
    assert a.authorize("User:a", "h", Op.DESCRIBE, T.TOPIC, "orders")
    assert not a.authorize("User:a", "h", Op.READ, T.TOPIC, "orders")


def test_hosts(tmp_path) -> None:
    a = authorizer(tmp_path, acl("User:a", Op.READ, host="10.0.0.1"))
    assert a.authorize("User:a", "10.0.0.1", Op.READ, T.TOPIC, "orders")
    assert not a.authorize("User:a", "10.0.0.2", Op.READ, T.TOPIC, "orders")


def test_super_users_and_no_acl_found(tmp_path) -> None:
    supers = parse_super_users("User:admin; User:ops;")
    assert supers == {"User:admin", "User:ops"}
    a = authorizer(tmp_path, acl("User:a", Op.READ), super_users=supers)
    assert a.authorize("User:ops", "h", Op.DELETE, T.TOPIC, "orders")
    assert not a.authorize("User:b", "h", Op.READ, T.TOPIC, "free")
    everyone = Authorizer(a.store, allow_everyone_if_no_acl_found=True)
    assert everyone.authorize("User:b", "h", Op.READ, T.TOPIC, "free")
    assert not everyone.authorize("User:b", "h", Op.READ, T.TOPIC, "orders")


def test_cache_drops_on_change_and_other_process_sees_it(tmp_path) -> None:
    a = authorizer(tmp_path)
    assert not a.authorize("User:a", "h", Op.READ, T.TOPIC, "orders")
    AclStore(tmp_path).add([acl("User:a", Op.READ)])  # as `kafkalog acls add` would
    assert a.authorize("User:a", "h", Op.READ, T.TOPIC, "orders")
    gone = AclStore(tmp_path).remove(AclBindingFilter(principal="User:a"))
    assert gone == [acl("User:a", Op.READ)]
    assert not a.authorize("User:a", "h", Op.READ, T.TOPIC, "orders")


def test_file_layout_and_restart(tmp_path) -> None:
    AclStore(tmp_path).add([acl("User:a", Op.READ), acl("User:a", Op.READ)])
    data = json.loads((tmp_path / "acls.json").read_text())
    entry = {
        "resource_type": "TOPIC",
        "name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:a",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    assert data == {"version": 1, "acls": [entry]}
    assert AclStore(tmp_path).acls() == (acl("User:a", Op.READ),)


def test_filters_any_and_match(tmp_path) -> None:
    bindings = [
        acl("User:a", Op.READ, "orders"),
        acl("User:a", Op.READ, "ord", pattern=PatternType.PREFIXED),
        acl("User:a", Op.READ, "*"),
        acl("User:a", Op.READ, "other"),
        acl("User:a", Op.READ, "orders", rtype=T.GROUP),
    ]
    match = AclBindingFilter(T.TOPIC, "orders", PatternType.MATCH)
    assert [b for b in bindings if match.matches(b)] == bindings[:3]
    exact = AclBindingFilter(T.ANY, "orders", PatternType.ANY)
    assert [b for b in bindings if exact.matches(b)] == [bindings[0], bindings[4]]
    prefixed = AclBindingFilter(pattern_type=PatternType.PREFIXED)
    assert [b for b in bindings if prefixed.matches(b)] == [bindings[1]]


@pytest.mark.parametrize(
    ("binding", "problem"),
    [
        (acl("User:a", Op.CLUSTER_ACTION), "operation CLUSTER_ACTION on a TOPIC"),
        (acl("User:a", Op.WRITE, rtype=T.GROUP), "operation WRITE on a GROUP"),
        (acl("User:a", Op.ALTER, "c", rtype=T.CLUSTER), "a Cluster resource not named"),
        (acl("User:a", Op.READ, pattern=PatternType.MATCH), "pattern type MATCH"),
        (acl("alice", Op.READ), r"principal .alice. \(not Type:name\)"),
        (acl("User:a", Op.READ, permission=AclPermissionType.ANY), "permission ANY"),
    ],
)
def test_invalid_bindings_are_refused(tmp_path, binding: AclBinding, problem: str) -> None:
    with pytest.raises(AclError, match=problem):
        AclStore(tmp_path).add([binding])
    assert not (tmp_path / "acls.json").exists()


def test_authorizer_settings() -> None:
    table = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": True,
    }
    config = SecurityConfig.from_mapping(table, "b.toml")
    assert config.authorizes and config.allow_everyone_if_no_acl_found
    assert not SecurityConfig().authorizes
    with pytest.raises(InvalidConfigError, match="true or false"):
        SecurityConfig.from_mapping({"allow.everyone.if.no.acl.found": "true"}, "b.toml")
    with pytest.raises(InvalidConfigError, match="authorizer.class.name must be empty"):
        SecurityConfig.from_mapping({"authorizer.class.name": "x.Y"}, "b.toml")
