"""``kafkalog`` as a child process for the serve tests: ``python -m
tests.spark_kafkalog._serve_child serve --log-dir D ...`` runs ``cli.main`` with its argv.

``KAFKALOG_HIDE_KIO=1`` makes ``import kio`` fail, as it does on Python 3.10 where kio has no
release: the CLI must then refuse ``serve`` in one line and run every other command.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("KAFKALOG_HIDE_KIO") == "1":
    sys.modules["kio"] = None  # type: ignore[assignment]  # import kio raises ImportError

from spark_kafkalog.cli import main  # noqa: E402  (after hiding kio)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
