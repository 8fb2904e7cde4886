"""``kafkalog users add|delete|list --log-dir DIR``: the SASL/SCRAM users of ``kafkalog serve``
(Kafka's ``kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'``).

- ``add --user U [--password PW | --password-stdin] [--mechanism M ...] [--iterations N]``:
  stores the user's salted SCRAM credential (default both SCRAM-SHA-256 and SCRAM-SHA-512,
  4096 iterations; Kafka's bounds 4096..16384) in ``DIR/scram-credentials.json``. PLAIN checks
  passwords against the same credentials. Prints ``Added user U (MECHANISMS).``
- ``delete --user U [--mechanism M ...]``: removes them (all by default); an unknown user is an
  error naming it.
- ``list``: one line per user and mechanism, ``U MECHANISM iterations=N`` (never a secret).

A running server reads the file again when it changes: a user added here authenticates at the
next connection, a deleted one no longer does (open connections stay as authenticated, as in
Kafka until re-authentication). No password is stored (``scram_credentials``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from broker_embedded.server.security.scram_credentials import (
    HASHES,
    CredentialStore,
    ScramCredential,
)
from spark_kafkalog.topics_command import CommandError


def run(
    action: str,
    log_dir: Path,
    out: TextIO,
    user: str | None = None,
    password: str | None = None,
    mechanisms: list[str] | None = None,
    iterations: int = 4096,
) -> int:
    store = CredentialStore(log_dir)
    chosen = tuple(mechanisms or HASHES)
    if action == "list":
        for name, creds in sorted(store.users().items()):
            for mechanism, credential in sorted(creds.items()):
                out.write(f"{name} {mechanism} iterations={credential.iterations}\n")
        return 0
    if not user:
        raise CommandError(f"users {action} needs --user")
    if action == "add":
        if not password:
            raise CommandError("users add needs --password or --password-stdin")
        for mechanism in chosen:
            store.upsert(
                user, mechanism, ScramCredential.from_password(mechanism, password, iterations)
            )
        out.write(f"Added user {user} ({', '.join(chosen)}).\n")
        return 0
    deleted = store.delete(user) if mechanisms is None else _delete_each(store, user, chosen)
    if not deleted:
        raise CommandError(f"no user {user!r} with {', '.join(chosen)} in {store.path}")
    out.write(f"Deleted user {user} ({', '.join(chosen)}).\n")
    return 0


def _delete_each(store: CredentialStore, user: str, mechanisms: tuple[str, ...]) -> bool:
    """Delete each mechanism's credential (all of them, not up to the first found)."""
    return any([store.delete(user, m) for m in mechanisms])
