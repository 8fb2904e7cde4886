"""SCRAM credentials of the users (RFC 5802 / 7677), salted, in the log dir.

File ``<log dir>/scram-credentials.json`` (mode 0600, replaced by atomic rename; a sidecar
``scram-credentials.lock`` serialises writers across processes, ``kafkalog users`` and the
server; both may exist before the log dir's first start, ``storage/log_dir.py`` allows them)::

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                           "stored_key": "<base64>", "server_key": "<base64>"},
                         "SCRAM-SHA-512": {...}}}}

No password is ever stored: ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword,
"Server Key")`` (Kafka's ``ScramFormatter``; the password's UTF-8 bytes, as Kafka takes them).
Iterations are Kafka's bounds, 4096..16384; user names 1..:data:`MAX_NAME` characters.

PLAIN checks a password against the user's SCRAM credential (SHA-256 if present, else SHA-512)
by deriving its StoredKey again: one PBKDF2 per PLAIN authentication (a few ms).

A file that cannot be read or parsed is a :class:`SecurityFileError` naming it: on the first
read (a server reads it as it starts, so it refuses to start) and to a writer; a running server
that finds it broken keeps the users it read before and logs the error once per change.

Thread safety: :class:`CredentialStore` reloads the file when its stat changes (so users added
or deleted by another process count from the next authentication) and guards its cache with a
lock; every method may be called from any thread.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import KafkaApiError
from broker_embedded.server.security.json_file import (
    SecurityFileError,
    file_stat,
    read_json,
    write_json,
)
from broker_embedded.storage.log_dir import SCRAM_CREDENTIALS_FILE, SCRAM_CREDENTIALS_LOCK

log = logging.getLogger(__name__)

FILE_NAME = SCRAM_CREDENTIALS_FILE
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
MAX_NAME = 1024
SALT_BYTES = 32
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class CredentialError(KafkaApiError):
    """A bad credential request (Kafka's UNSUPPORTED_SASL_MECHANISM / UNACCEPTABLE_CREDENTIAL
    / RESOURCE_NOT_FOUND): the message names the user and mechanism."""

    code = ErrorCode.unacceptable_credential

    def __init__(self, message: str, code: int = ErrorCode.unacceptable_credential) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salted: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        name = HASHES[mechanism]
        client_key = hmac.digest(salted, b"Client Key", name)
        stored_key = hashlib.new(name, client_key).digest()
        return cls(salt, iterations, stored_key, hmac.digest(salted, b"Server Key", name))

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        iterations: int = DEFAULT_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        check_mechanism(mechanism)
        check_iterations(iterations)
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    def matches(self, mechanism: str, password: str) -> bool:
        """Does ``password`` derive this credential's StoredKey (constant-time compare)?"""
        again = ScramCredential.from_password(mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(again.stored_key, self.stored_key)

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, data: dict) -> ScramCredential:
        b64 = base64.b64decode
        return cls(
            b64(data["salt"]),
            int(data["iterations"]),
            b64(data["stored_key"]),
            b64(data["server_key"]),
        )


def check_mechanism(mechanism: str) -> None:
    if mechanism not in HASHES:
        raise CredentialError(
            f"unsupported SCRAM mechanism {mechanism!r} (one of {', '.join(HASHES)})",
            code=ErrorCode.unsupported_sasl_mechanism,
        )


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(f"iterations {iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")


def check_user(user: str) -> None:
    if not 0 < len(user) <= MAX_NAME:
        raise CredentialError(f"user name must be 1..{MAX_NAME} characters, not {len(user)}")


Users = dict[str, dict[str, ScramCredential]]


class CredentialStore:
    """The users' credentials of one log dir (module docstring)."""

    def __init__(self, log_dir: str | Path) -> None:
        self.path = Path(log_dir) / FILE_NAME
        self._lock = threading.Lock()
        self._stat: tuple[int, int, int] | None = None
        self._users: Users = {}
        self._loaded = False

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users().get(user, {}).get(mechanism)

    def users(self) -> Users:
        """Every user's credentials, by user and mechanism (the file as it is now; a broken
        file: module docstring)."""
        with self._lock:
            stat = file_stat(self.path)
            if stat != self._stat or not self._loaded:
                try:
                    self._users = self._read() if stat is not None else {}
                except SecurityFileError as e:
                    if not self._loaded:  # never read: the caller (a starting server) fails
                        raise
                    log.error("%s; the %d users read before stay", e, len(self._users))
                self._stat = stat
                self._loaded = True
            return self._users

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        check_user(user)
        check_mechanism(mechanism)
        check_iterations(credential.iterations)
        with self._writing() as users:
            users.setdefault(user, {})[mechanism] = credential

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove the user's credential of ``mechanism`` (every one if None); False if none."""
        with self._writing() as users:
            held = users.get(user, {})
            gone = [m for m in list(held) if mechanism in (None, m)]
            for m in gone:
                del held[m]
            if not held:
                users.pop(user, None)
            return bool(gone)

    @contextmanager
    def _writing(self) -> Iterator[Users]:
        """The users under the cross-process lock, written back (atomically) after."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / SCRAM_CREDENTIALS_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            users = self._read() if self.path.exists() else {}
            yield users
            self._write(users)

    def _read(self) -> Users:
        data = read_json(self.path, "credentials file")
        if data is None:
            return {}
        try:
            return {
                user: {m: ScramCredential.from_json(c) for m, c in creds.items()}
                for user, creds in data["users"].items()  # type: ignore[index]
            }
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SecurityFileError(f"{self.path} is not a valid credentials file: {e!r}") from None

    def _write(self, users: Users) -> None:
        data = {
            "version": 1,
            "users": {u: {m: c.to_json() for m, c in creds.items()} for u, creds in users.items()},
        }
        write_json(self.path, data)
