"""``kafkalog`` as a child process for the serve tests: ``python -m
tests.spark_kafkalog._serve_child serve --log-dir D ...`` runs ``cli.main`` with its argv.

``--held`` first (``python -m tests.spark_kafkalog._serve_child --held serve ...``): a server
started ahead of its turn, as the one that replaces a killed one; it imports the serve command's
modules, then waits for a line ``go`` on stdin before running (exit status 4 at the end of stdin
without one), so that the test's restart costs no interpreter start-up.

``KAFKALOG_HIDE_KIO=1`` makes ``import kio`` fail, as it does on Python 3.10 where kio has no
release: the CLI must then refuse ``serve`` in one line and run every other command.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("KAFKALOG_HIDE_KIO") == "1":
    sys.modules["kio"] = None  # type: ignore[assignment]  # import kio raises ImportError

from spark_kafkalog.cli import main  # noqa: E402  (after hiding kio)

HELD = "--held"


def wait_for_go(argv: list[str]) -> list[str] | None:
    """``argv`` without :data:`HELD` once ``go`` came (None at the end of stdin without it)."""
    import spark_kafkalog.serve_command  # noqa: F401  (the server's modules, before the wait)

    return argv[1:] if sys.stdin.readline().strip() == "go" else None


if __name__ == "__main__":
    argv: list[str] | None = sys.argv[1:]
    if argv[:1] == [HELD]:
        argv = wait_for_go(argv)
    sys.exit(4 if argv is None else main(argv))
