"""``kafkalog acls add|list|remove``: the ACLs of ``kafkalog serve``'s authorizer, spelled as
Kafka's ``kafka-acls.sh --add|--list|--remove``, on a log dir (``--log-dir DIR``: its
``acls.json``, which a running server reads again within 100 ms) or over the wire
(``--bootstrap-server HOST:PORT`` with ``--command-config``: CreateAcls / DescribeAcls /
DeleteAcls, which need Alter / Describe on the Cluster).

Options as kafka-acls.sh's: ``--allow-principal P`` / ``--deny-principal P`` (repeatable,
``User:alice``), ``--allow-host H`` / ``--deny-host H`` (default ``*``), ``--operation OP``
(repeatable: Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite, All; default All), resources ``--topic T``, ``--group G``,
``--transactional-id T`` (repeatable) and ``--cluster``, ``--resource-pattern-type`` literal |
prefixed (add), or also any | match (list and remove; default literal, as Kafka's).

- add: one binding per resource x principal x host x operation (allow and deny alike); prints
  ``Adding ACLs for resource ...`` and the entries, as kafka-acls.sh.
- list: the bindings of each resource given (every binding with none), grouped per resource
  pattern: ``Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders,
  patternType=LITERAL)`:`` and one ``(principal=User:alice, host=*, operation=READ,
  permissionType=ALLOW)`` line each; ``--principal P`` keeps that principal's only.
- remove: the bindings of each resource given matching the principals, hosts and operations
  given (every binding of the resource when none is given); prints what was removed.

Errors are :class:`CommandError` lines (an invalid binding names it; a broker's refusal names
its error). Not thread-safe (one command).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from broker_embedded.error_code import ErrorCode
from broker_embedded.server.security.authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    AclStore,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from spark_kafkalog.topics_command import CommandError

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
# the API keys (not imported from the client: --log-dir works without kio)
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


@dataclass(frozen=True)
class AclArgs:
    """What the command line named (empty tuples where nothing was given)."""

    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    transactional_ids: tuple[str, ...] = ()
    cluster: bool = False
    pattern_type: str = "literal"
    allow_principals: tuple[str, ...] = ()
    deny_principals: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    principal: str | None = None  # list: only this principal's

    def resources(self) -> list[tuple[ResourceType, str]]:
        named = [(ResourceType.TOPIC, t) for t in self.topics]
        named += [(ResourceType.GROUP, g) for g in self.groups]
        named += [(ResourceType.TRANSACTIONAL_ID, t) for t in self.transactional_ids]
        if self.cluster:
            named.append((ResourceType.CLUSTER, CLUSTER_NAME))
        return named

    def entries(self) -> list[tuple[AclPermissionType, str, str]]:
        """(permission, principal, host) of every principal given."""
        allow = itertools.product([ALLOW], self.allow_principals, self.allow_hosts or ("*",))
        deny = itertools.product([DENY], self.deny_principals, self.deny_hosts or ("*",))
        return [*allow, *deny]


class AclBackend(Protocol):
    def add(self, bindings: list[AclBinding]) -> None: ...
    def list(self, selector: AclBindingFilter) -> list[AclBinding]: ...
    def remove(self, selectors: list[AclBindingFilter]) -> list[AclBinding]: ...


def operation(name: str) -> AclOperation:
    """``Read``, ``DescribeConfigs``, ``idempotent_write``... as an operation."""
    key = name.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in _NOT_NAMED:
            return op
    named = ", ".join(_title(op) for op in AclOperation if op not in _NOT_NAMED)
    raise CommandError(f"unknown operation {name!r} (one of {named})")


_NOT_NAMED = (AclOperation.UNKNOWN, AclOperation.ANY)


def _title(op: AclOperation) -> str:
    return "".join(part.title() for part in op.name.split("_"))


def run(action: str, backend: AclBackend, args: AclArgs, out: TextIO) -> int:
    if action == "add":
        return _add(backend, args, out)
    if action == "list":
        return _list(backend, args, out)
    return _remove(backend, args, out)


def _pattern(args: AclArgs, allowed: Sequence[str]) -> PatternType:
    if args.pattern_type.lower() not in allowed:
        raise CommandError(
            f"--resource-pattern-type {args.pattern_type} is not one of {', '.join(allowed)}"
        )
    return PatternType[args.pattern_type.upper()]


def _add(backend: AclBackend, args: AclArgs, out: TextIO) -> int:
    pattern_type = _pattern(args, ("literal", "prefixed"))
    if not args.resources() or not args.entries():
        raise CommandError(
            "acls add needs a resource (--topic, --group, --cluster, --transactional-id) and "
            "--allow-principal or --deny-principal"
        )
    ops = [operation(o) for o in args.operations] or [AclOperation.ALL]
    by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
    for rtype, name in args.resources():
        pattern = ResourcePattern(rtype, name, pattern_type)
        by_pattern[pattern] = [
            AclBinding(pattern, AccessControlEntry(principal, host, op, permission))
            for (permission, principal, host), op in itertools.product(args.entries(), ops)
        ]
    bindings = [b for group in by_pattern.values() for b in group]
    try:
        for b in bindings:
            b.check()
    except AclError as e:
        raise CommandError(str(e)) from None
    for pattern, group in by_pattern.items():
        out.write(f"Adding ACLs for resource `{_pattern_text(pattern)}`: \n")
        _write_entries(out, [b.entry for b in group])
    backend.add(bindings)
    return 0


def _list(backend: AclBackend, args: AclArgs, out: TextIO) -> int:
    pattern_type = _pattern(args, ("literal", "prefixed", "any", "match"))
    selectors = [
        AclBindingFilter(rtype, name, pattern_type, args.principal)
        for rtype, name in args.resources()
    ] or [AclBindingFilter(principal=args.principal)]
    found = [b for s in selectors for b in backend.list(s)]
    _write_grouped(out, "Current ACLs for resource", found)
    return 0


def _remove(backend: AclBackend, args: AclArgs, out: TextIO) -> int:
    pattern_type = _pattern(args, ("literal", "prefixed", "any", "match"))
    if not args.resources():
        raise CommandError(
            "acls remove needs a resource (--topic, --group, --cluster, --transactional-id)"
        )
    ops = [operation(o) for o in args.operations] or [AclOperation.ANY]
    entries: list[tuple[AclPermissionType, str | None, str | None]] = list(args.entries())
    if not entries:
        entries = [(AclPermissionType.ANY, None, None)]
    selectors = [
        AclBindingFilter(rtype, name, pattern_type, principal, host, op, permission)
        for (rtype, name), (permission, principal, host), op in itertools.product(
            args.resources(), entries, ops
        )
    ]
    removed = backend.remove(selectors)
    _write_grouped(out, "Removed ACLs for resource", removed)
    return 0


def _write_grouped(out: TextIO, title: str, bindings: Iterable[AclBinding]) -> None:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        out.write(f"{title} `{_pattern_text(pattern)}`: \n")
        _write_entries(out, entries)


def _write_entries(out: TextIO, entries: Iterable[AccessControlEntry]) -> None:
    for e in dict.fromkeys(entries):
        out.write(
            f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission.name})\n"
        )
    out.write("\n")


def _pattern_text(p: ResourcePattern) -> str:
    return (
        f"ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, "
        f"patternType={p.pattern_type.name})"
    )


class LogDirAcls:
    """The ACLs in a log dir's ``acls.json``."""

    def __init__(self, log_dir: Path) -> None:
        self.store = AclStore(log_dir, refresh_ms=0)

    def add(self, bindings: list[AclBinding]) -> None:
        self.store.add(bindings)

    def list(self, selector: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.store.acls() if selector.matches(b)]

    def remove(self, selectors: list[AclBindingFilter]) -> list[AclBinding]:
        return [b for s in selectors for b in self.store.remove(s)]


class WireAcls:
    """The ACLs of a running broker, over CreateAcls / DescribeAcls / DeleteAcls."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def add(self, bindings: list[AclBinding]) -> None:
        def build(types: Any) -> dict[str, Any]:
            return {
                "creations": tuple(
                    types.AclCreation(
                        resource_type=b.pattern.resource_type,
                        resource_name=b.pattern.name,
                        resource_pattern_type=b.pattern.pattern_type,
                        principal=b.entry.principal,
                        host=b.entry.host,
                        operation=b.entry.operation,
                        permission_type=b.entry.permission,
                    )
                    for b in bindings
                )
            }

        for result in self.client.any_broker(CREATE_ACLS, build).results:
            _check(result.error_code, result.error_message, "CreateAcls")

    def list(self, selector: AclBindingFilter) -> list[AclBinding]:
        response = self.client.any_broker(DESCRIBE_ACLS, lambda _: _filter_fields(selector))
        _check(response.error_code, response.error_message, "DescribeAcls")
        return [
            _binding(
                r.resource_type,
                r.resource_name,
                r.pattern_type,
                a.principal,
                a.host,
                a.operation,
                a.permission_type,
            )
            for r in response.resources
            for a in r.acls
        ]

    def remove(self, selectors: list[AclBindingFilter]) -> list[AclBinding]:
        def build(types: Any) -> dict[str, Any]:
            return {
                "filters": tuple(types.DeleteAclsFilter(**_filter_fields(s)) for s in selectors)
            }

        removed = []
        for result in self.client.any_broker(DELETE_ACLS, build).filter_results:
            _check(result.error_code, result.error_message, "DeleteAcls")
            removed += [
                _binding(
                    a.resource_type,
                    a.resource_name,
                    a.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission_type,
                )
                for a in result.matching_acls
            ]
        return removed


def _filter_fields(s: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": s.resource_type,
        "resource_name_filter": s.name,
        "pattern_type_filter": s.pattern_type,
        "principal_filter": s.principal,
        "host_filter": s.host,
        "operation": s.operation,
        "permission_type": s.permission,
    }


def _binding(rtype, name, pattern, principal, host, op, permission) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(rtype), name, PatternType(pattern)),
        AccessControlEntry(principal, host, AclOperation(op), AclPermissionType(permission)),
    )


def _check(code: Any, message: str | None, api: str) -> None:
    if code != ErrorCode.none:
        name = getattr(code, "name", str(int(code))).upper()
        raise CommandError(f"{api} failed: {name}" + (f": {message}" if message else ""))
