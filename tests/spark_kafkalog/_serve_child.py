"""``kafkalog`` as a child process for the serve tests: ``python -m
tests.spark_kafkalog._serve_child serve --log-dir D ...`` runs ``cli.main`` with its argv.

Until the Fetch handler (another branch) is merged, the server's handlers do not register
Fetch, and librdkafka produces v2 batches only when a broker advertises Fetch v4+: so each
broker's API registration also runs ``advertise_fetch_placeholder`` (Fetch advertised, a Fetch
request closes the connection). Once ``handlers.fetch`` registers key 1 this does nothing and
the child is ``kafkalog`` itself.

``KAFKALOG_HIDE_KIO=1`` makes ``import kio`` fail, as it does on Python 3.10 where kio has no
release: the CLI must then refuse ``serve`` in one line and run every other command.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("KAFKALOG_HIDE_KIO") == "1":
    sys.modules["kio"] = None  # type: ignore[assignment]  # import kio raises ImportError
    from spark_kafkalog.cli import main
else:
    from spark_kafkalog import serve_command
    from spark_kafkalog.cli import main
    from tests.broker_embedded.server._serve import advertise_fetch_placeholder

    _register_all = serve_command.register_all

    def _register_with_fetch(apis, ctx) -> None:
        _register_all(apis, ctx)
        advertise_fetch_placeholder(apis)

    serve_command.register_all = _register_with_fetch

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
