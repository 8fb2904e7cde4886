"""ACLs and the authorizer, with Kafka's model (``AclAuthorizer`` / ``StandardAuthorizer``).

An ACL binding is a resource pattern (type, name, pattern type) and an entry (principal, host,
operation, permission). The enum values are Kafka's wire codes (``ResourceType``,
``PatternType``, ``AclOperation``, ``AclPermissionType``), so the protocol's CreateAcls /
DescribeAcls / DeleteAcls carry them unchanged.

Patterns: LITERAL matches the name exactly, or every name when the name is ``*``; PREFIXED
matches every name starting with it. Principals match exactly or through ``User:*``; hosts match
exactly or through ``*``.

The decision for (principal, host, operation, resource), as Kafka's:

1. a principal of ``super.users`` is allowed everything;
2. no ACL at all on the resource (any principal): ``allow.everyone.if.no.acl.found``;
3. a DENY entry matching the principal, host and operation (or All) denies; deny wins;
4. an ALLOW entry matching the principal, host and operation (or All) allows, where Describe is
   implied by Read, Write, Delete and Alter, and DescribeConfigs by AlterConfigs;
5. else denied.

Persistence: ``<log dir>/acls.json`` (replaced by atomic rename under the cross-process lock
``acls.lock``, as the SCRAM credential store does)::

    {"version": 1, "acls": [{"resource_type": "TOPIC", "name": "orders",
                             "pattern_type": "LITERAL", "principal": "User:alice",
                             "host": "*", "operation": "READ", "permission": "ALLOW"}, ...]}

Limits: at most :data:`MAX_ACLS` bindings (adding more is an :class:`AclError`); the decision
cache holds at most :data:`MAX_CACHED` decisions and is emptied when full.

A file that cannot be read or parsed is a :class:`SecurityFileError` naming it: on the first
read (:func:`authorizer_for`, when a server starts, so it refuses to start), and to a writer;
a running server that finds the file broken keeps the ACLs it read before and logs the error
(once per change of the file), so a bad edit neither opens nor closes the broker.

Thread safety: :class:`AclStore` guards its in-memory copy with a lock and reloads the file when
its stat changes (checked at most every ``refresh_ms``, so a running server sees the CLI's
changes within that); :class:`Authorizer` caches decisions per (principal, host, operation,
resource) and drops the cache whenever the store's generation changes. Every method may be
called from any thread.
"""

from __future__ import annotations

import enum
import fcntl
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import InvalidRequestError
from broker_embedded.server.security.json_file import (
    SecurityFileError,
    file_stat,
    read_json,
    write_json,
)
from broker_embedded.server.security.security_config import SecurityConfig
from broker_embedded.storage.log_dir import ACLS_FILE, ACLS_LOCK

log = logging.getLogger(__name__)

MAX_ACLS = 100_000
MAX_CACHED = 100_000
REFRESH_MS = 100  # how stale a server's view of acls.json may be
CLUSTER_NAME = "kafka-cluster"  # the Cluster resource's one name, as Kafka's
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations each resource type takes (kafka-acls.sh's table); All is valid everywhere.
VALID_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.ALL,
        }
    ),
    ResourceType.GROUP: frozenset(
        {  # the configs ones since Kafka 3.8's group configs
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.ALL,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
            AclOperation.ALL,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset(
        {AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.ALL}
    ),
}

# What an ALLOW of an operation also allows (Kafka's implied operations).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.ALL,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.ALL}
    ),
}


class AclError(InvalidRequestError):
    """An ACL or filter Kafka refuses (INVALID_REQUEST, 42); the message names the binding."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Does this pattern cover the resource ``(resource_type, name)``?"""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" or "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType

    def applies(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def check(self) -> None:
        """Refuse what Kafka refuses to store (AclError naming the binding)."""
        p, e = self.pattern, self.entry
        problem = ""
        if p.resource_type not in VALID_OPERATIONS:
            problem = f"resource type {p.resource_type.name}"
        elif p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            problem = f"pattern type {p.pattern_type.name}"
        elif not p.name:
            problem = "an empty resource name"
        elif p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            problem = f"a Cluster resource not named {CLUSTER_NAME}"
        elif e.operation not in VALID_OPERATIONS[p.resource_type]:
            problem = f"operation {e.operation.name} on a {p.resource_type.name}"
        elif e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            problem = f"permission {e.permission.name}"
        elif not e.principal.partition(":")[2]:
            problem = f"principal {e.principal!r} (not Type:name)"
        elif not e.host:
            problem = "an empty host"
        if problem:
            raise AclError(f"invalid ACL {self.describe()}: {problem}")

    def describe(self) -> str:
        p, e = self.pattern, self.entry
        return (
            f"{e.permission.name} {e.principal} {e.operation.name} from host {e.host} on "
            f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}"
        )

    def to_json(self) -> dict:
        p, e = self.pattern, self.entry
        return {
            "resource_type": p.resource_type.name,
            "name": p.name,
            "pattern_type": p.pattern_type.name,
            "principal": e.principal,
            "host": e.host,
            "operation": e.operation.name,
            "permission": e.permission.name,
        }

    @classmethod
    def from_json(cls, d: dict) -> AclBinding:
        pattern = ResourcePattern(
            ResourceType[d["resource_type"]], d["name"], PatternType[d["pattern_type"]]
        )
        entry = AccessControlEntry(
            d["principal"],
            d["host"],
            AclOperation[d["operation"]],
            AclPermissionType[d["permission"]],
        )
        return cls(pattern, entry)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls / DeleteAcls select: None (a null string) or ANY matches every value;
    pattern type MATCH selects every pattern covering the named resource (literal, ``*`` and
    prefixes of it), ANY every pattern type with the exact name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        return (
            self.resource_type in (ResourceType.ANY, p.resource_type)
            and self._pattern_matches(p)
            and self.principal in (None, e.principal)
            and self.host in (None, e.host)
            and self.operation in (AclOperation.ANY, e.operation)
            and self.permission in (AclPermissionType.ANY, e.permission)
        )

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        if self.pattern_type == PatternType.MATCH:
            return self.name is None or p.matches(p.resource_type, self.name)
        if self.pattern_type not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name in (None, p.name)


class AclStore:
    """The ACL bindings of one log dir (module docstring)."""

    def __init__(self, log_dir: str | Path, refresh_ms: int = REFRESH_MS) -> None:
        self.path = Path(log_dir) / ACLS_FILE
        self._refresh_s = refresh_ms / 1000
        self._lock = threading.Lock()
        self._stat: tuple[int, int, int] | None = None
        self._checked = float("-inf")
        self._acls: tuple[AclBinding, ...] = ()
        self._loaded = False
        self._generation = 0

    def acls(self) -> tuple[AclBinding, ...]:
        """Every binding (the file as it was at most ``refresh_ms`` ago)."""
        self._refresh()
        return self._acls

    def generation(self) -> int:
        """A number that changes whenever the bindings may have changed."""
        self._refresh()
        return self._generation

    def add(self, bindings: Iterable[AclBinding]) -> None:
        new = list(bindings)
        for binding in new:
            binding.check()
        with self._writing() as acls:
            acls.extend(b for b in dict.fromkeys(new) if b not in acls)
            if len(acls) > MAX_ACLS:
                raise AclError(f"{self.path}: more than {MAX_ACLS} ACLs")

    def remove(self, selector: AclBindingFilter) -> list[AclBinding]:
        """Delete the bindings the filter selects; returns them."""
        with self._writing() as acls:
            gone = [b for b in acls if selector.matches(b)]
            acls[:] = [b for b in acls if not selector.matches(b)]
        return gone

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self._refresh_s:
            return
        with self._lock:
            self._checked = now
            stat = file_stat(self.path)
            if stat == self._stat and self._loaded:
                return
            try:
                self._acls = tuple(self._read()) if stat is not None else ()
            except SecurityFileError as e:
                if not self._loaded:  # never read: the caller (a starting server) fails
                    raise
                log.error("%s; the %d ACLs read before stay in force", e, len(self._acls))
                self._stat = stat
                return
            self._stat, self._loaded = stat, True
            self._generation += 1

    @contextmanager
    def _writing(self) -> Iterator[list[AclBinding]]:
        """The bindings under the cross-process lock, written back atomically after."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / ACLS_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            acls = self._read()
            yield acls
            self._write(acls)
        self._refresh(force=True)

    def _read(self) -> list[AclBinding]:
        data = read_json(self.path, "ACL file")
        if data is None:
            return []
        try:
            return [AclBinding.from_json(d) for d in data["acls"]]  # type: ignore[index]
        except (KeyError, TypeError, ValueError) as e:
            raise SecurityFileError(f"{self.path} is not a valid ACL file: {e!r}") from None

    def _write(self, acls: list[AclBinding]) -> None:
        write_json(self.path, {"version": 1, "acls": [b.to_json() for b in acls]})


def authorizer_for(security: SecurityConfig, log_dir: str | Path) -> Authorizer | None:
    """The authorizer ``security`` configures over ``log_dir``'s ACLs (None: authorization
    off, every request allowed); its ACL file read once now."""
    if not security.authorizes:
        return None
    store = AclStore(log_dir)
    store.acls()  # read now: a broken file fails the start (SecurityFileError naming it)
    return Authorizer(
        store, parse_super_users(security.super_users), security.allow_everyone_if_no_acl_found
    )


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: semicolon-separated principals (``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    """Decides (principal, host, operation, resource) from an :class:`AclStore` (module
    docstring), caching each decision until the store's bindings change."""

    def __init__(
        self,
        store: AclStore,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self._generation = -1

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        generation = self.store.generation()
        if generation != self._generation or len(self._cache) >= MAX_CACHED:
            self._cache = {}
            self._generation = generation
        key = (principal, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            self._cache[key] = decision
        return decision

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May the principal do ``operation`` on some resource of the type (Kafka's
        ``authorizeByResourceType``, simplified: an ALLOW entry for it, or All, that a DENY of
        the ``*`` literal does not cancel)? Not cached: InitProducerId asks it once."""
        if principal in self.super_users:
            return True
        allowing, denying = False, False
        ops = (operation, AclOperation.ALL)
        for b in self.store.acls():
            e = b.entry
            if b.pattern.resource_type != resource_type or e.operation not in ops:
                continue
            if not e.applies(principal, host):
                continue
            if e.permission == AclPermissionType.ALLOW:
                allowing = True
            elif b.pattern.name == WILDCARD and b.pattern.pattern_type == PatternType.LITERAL:
                denying = True
        return allowing and not denying

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = [b.entry for b in self.store.acls() if b.pattern.matches(resource_type, name)]
        if not entries:
            return self.allow_everyone_if_no_acl_found
        mine = [e for e in entries if e.applies(principal, host)]
        denying = (operation, AclOperation.ALL)
        if any(e.permission == AclPermissionType.DENY and e.operation in denying for e in mine):
            return False
        allowing = _IMPLIED_BY.get(operation, frozenset(denying))
        return any(
            e.permission == AclPermissionType.ALLOW and e.operation in allowing for e in mine
        )
