"""The JSON files of the security stores (SCRAM credentials, ACLs) in a log dir: written to a
``.tmp`` sibling (mode 0600), fsynced and renamed over the file, so a reader sees the old or the
new file, never a torn one; :func:`file_stat` is what tells a reader the file changed.

Functions without state: thread-safe (writers serialise on the stores' own locks).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def file_stat(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of ``path``; None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def write_json(path: Path, data: object) -> None:
    """Replace ``path`` by ``data`` as JSON, atomically (module docstring)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
