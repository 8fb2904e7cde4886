"""The JSON files of the security stores (SCRAM credentials, ACLs) in a log dir: written to a
``.tmp`` sibling (mode 0600), fsynced and renamed over the file, so a reader sees the old or the
new file, never a torn one; :func:`file_stat` is what tells a reader the file changed.
:func:`read_json` reads one; a file that cannot be read or is not JSON is a
:class:`SecurityFileError` naming it (a server refuses to start on one: running with no users or
no ACLs instead would lock everyone out or, with ``allow.everyone.if.no.acl.found``, let
everyone in).

Functions without state: thread-safe (writers serialise on the stores' own locks).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import KafkaApiError


class SecurityFileError(KafkaApiError):
    """A credentials or ACL file that cannot be read or parsed; the message names the file
    (UNKNOWN_SERVER_ERROR to a client whose request needed it)."""

    code = ErrorCode.unknown_server_error


def file_stat(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of ``path``; None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def read_json(path: Path, what: str) -> object | None:
    """The JSON value of ``path`` (None when it does not exist); :class:`SecurityFileError`
    naming the file and ``what`` it should be when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SecurityFileError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    except ValueError as e:  # not UTF-8 or not JSON
        raise SecurityFileError(f"{path} is not a valid {what} (not JSON: {e})") from None


def write_json(path: Path, data: object) -> None:
    """Replace ``path`` by ``data`` as JSON, atomically (module docstring)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
