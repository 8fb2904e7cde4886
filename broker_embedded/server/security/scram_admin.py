"""AlterUserScramCredentials (51, v0) and DescribeUserScramCredentials (50, v0), as Kafka's
controller answers them, over a :class:`CredentialStore`.

Mechanism numbers are Kafka's ``ScramMechanism`` types: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.

Alter: one result per user named, the first error found for that user wins, and a user with
an error changes nothing (the others are applied):
- an empty user name: UNACCEPTABLE_CREDENTIAL (93) "Username must not be empty";
- a mechanism that is not 1 or 2: UNSUPPORTED_SASL_MECHANISM (33) "Unknown SCRAM mechanism";
- a user changed twice in one request (whatever the mechanisms: the deletions are taken
  first, then the upsertions, as Kafka's controller takes them): DUPLICATE_RESOURCE (92);
- iterations outside 4096..16384: UNACCEPTABLE_CREDENTIAL "Too few/many iterations";
- deleting a credential that does not exist: RESOURCE_NOT_FOUND (91).
An upsertion carries the client's salt and SaltedPassword (the password never travels); the
store keeps StoredKey and ServerKey derived from it (``scram_credentials``).

Describe: every user when ``users`` is null or empty; a named user without credentials is
RESOURCE_NOT_FOUND in its result; a name asked twice is DUPLICATE_RESOURCE for it; the
messages without an error are "" (Kafka's schema default), not null.

Authorization (with an authorizer): Alter needs Alter on the Cluster, Describe needs Describe
on the Cluster; refused: CLUSTER_AUTHORIZATION_FAILED (31) with Kafka's default message
"Cluster authorization failed." for every user, nothing changed. A refused Describe answers it
in a result per user asked (one for user "" when every user is asked) under a top-level code
0, where Kafka also sets the top-level code (with a null message): librdkafka (confluent-kafka
2.16) frees a string it did not allocate for any top-level error of this response and aborts
the client's process, against Kafka 3.9 as well. Kafka's Java client fails ``all()`` with the
first user's error, so it reports the refusal either way. Thread-safe: the store locks.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from kio.schema.alter_user_scram_credentials.v0 import response as alter_response
from kio.schema.describe_user_scram_credentials.v0 import response as describe_response
from kio.static.primitive import i8, i32

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import kafka_message
from broker_embedded.server.security.acl_apis import allowed
from broker_embedded.server.security.authorizer import AclOperation, Authorizer, ResourceType
from broker_embedded.server.security.scram_credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    CredentialStore,
    ScramCredential,
)

DESCRIBE_KEY, ALTER_KEY = 50, 51
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TYPES = {name: number for number, name in MECHANISMS.items()}

Failure = tuple[ErrorCode, str]
DENIED: Failure = (
    ErrorCode.cluster_authorization_failed,
    kafka_message(ErrorCode.cluster_authorization_failed),
)


def register_scram_apis(
    apis: Any, store: CredentialStore, authorizer: Authorizer | None = None
) -> None:
    """Serve both APIs (v0) on a :class:`KafkaApis` over ``store``."""

    def gate(request: Any, operation: AclOperation) -> bool:
        return allowed(authorizer, request, operation, ResourceType.CLUSTER)

    apis.register_responder(
        DESCRIBE_KEY, 0, 0, lambda r: describe(r.body, store, gate(r, AclOperation.DESCRIBE))
    )
    apis.register_responder(
        ALTER_KEY, 0, 0, lambda r: alter(r.body, store, gate(r, AclOperation.ALTER))
    )


def alter(body: Any, store: CredentialStore, authorized: bool = True) -> Any:
    changes = (*body.deletions, *body.upsertions)
    users = dict.fromkeys(c.name for c in changes)
    if not authorized:
        failures: dict[str, Failure] = dict.fromkeys(users, DENIED)
        accepted: dict[str, Any] = {}
    else:
        failures, accepted = _checked(changes, store)
    for name, change in accepted.items():
        mechanism = MECHANISMS[int(change.mechanism)]
        if hasattr(change, "salted_password"):
            credential = ScramCredential.from_salted_password(
                mechanism, change.salted_password, change.salt, int(change.iterations)
            )
            store.upsert(name, mechanism, credential)
        else:
            store.delete(name, mechanism)
    results = tuple(
        alter_response.AlterUserScramCredentialsResult(
            user=user,
            error_code=failures.get(user, (ErrorCode.none, None))[0],
            error_message=failures.get(user, (ErrorCode.none, None))[1],
        )
        for user in users
    )
    return alter_response.AlterUserScramCredentialsResponse(
        throttle_time=timedelta(0), results=results
    )


def _checked(changes: tuple[Any, ...], store: CredentialStore) -> tuple[dict, dict]:
    """The failure of each user that has one and the one change of each other user, the
    deletions taken before the upsertions (Kafka's controller): a user's first failure wins;
    a second change of a user (whatever its mechanism) fails it DUPLICATE_RESOURCE."""
    failures: dict[str, Failure] = {}
    accepted: dict[str, Any] = {}
    for change in changes:
        if change.name in failures:
            continue
        if accepted.pop(change.name, None) is not None:
            failures[change.name] = (
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        failure = _check(change, store)
        if failure is None:
            accepted[change.name] = change
        else:
            failures[change.name] = failure
    return failures, accepted


def _check(change: Any, store: CredentialStore) -> Failure | None:
    mechanism = int(change.mechanism)
    if not change.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    iterations = getattr(change, "iterations", None)
    if iterations is not None and iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if iterations is not None and iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if iterations is None and store.credential(change.name, MECHANISMS[mechanism]) is None:
        return (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        )
    return None


def describe(body: Any, store: CredentialStore, authorized: bool = True) -> Any:
    if not authorized:
        return _refused(body)
    users = store.users()
    asked = [u.name for u in body.users or ()]
    counts = Counter(asked)
    names = list(dict.fromkeys(asked)) if asked else sorted(users)
    results = tuple(_described(name, users.get(name), counts[name]) for name in names)
    return describe_response.DescribeUserScramCredentialsResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, error_message="", results=results
    )


def _described(name: str, credentials: dict | None, asked: int) -> Any:
    error, message, infos = ErrorCode.none, "", ()
    if asked > 1:
        error = ErrorCode.duplicate_resource
        message = (
            f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
        )
    elif not credentials:
        error = ErrorCode.resource_not_found
        message = f"Attempt to describe a user credential that does not exist: {name}"
    else:
        infos = tuple(
            describe_response.CredentialInfo(
                mechanism=i8(MECHANISM_TYPES[m]), iterations=i32(c.iterations)
            )
            for m, c in sorted(credentials.items())
        )
    return describe_response.DescribeUserScramCredentialsResult(
        user=name, error_code=error, error_message=message, credential_infos=infos
    )


def _refused(body: Any) -> Any:
    """The refusal in a result per user asked (one for user "" when every user is asked, as
    Kafka's ``getErrorResponse`` leaves the name unset), top-level code 0 (module docstring)."""
    code, message = DENIED
    names = dict.fromkeys(u.name for u in body.users or ()) or ("",)
    results = tuple(
        describe_response.DescribeUserScramCredentialsResult(
            user=name, error_code=code, error_message=message, credential_infos=()
        )
        for name in names
    )
    return describe_response.DescribeUserScramCredentialsResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None, results=results
    )
