"""A server child process for the descriptor and memory tests: ``python -m
tests.broker_embedded.server._serve_child LOG_DIR NOFILE CONFIG_JSON``.

Lowers its RLIMIT_NOFILE soft limit to NOFILE first (0: unchanged), so that the broker config's
defaults read the lowered limit; opens the broker of LOG_DIR with ``BrokerConfig`` fields from
CONFIG_JSON (``{"fetch_max_pinned_regions": 4}``), serves every API on 127.0.0.1 port 0, prints
``port N`` and serves until its stdin ends (then shuts down, bounded). Its log goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import sys


def main(log_dir: str, nofile: int, overrides: dict) -> None:
    if nofile:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    from broker_embedded.broker import Broker
    from broker_embedded.broker_config import BrokerConfig
    from broker_embedded.server.handlers import broker_server

    values = {"num_network_threads": 2, "num_io_threads": 2, **overrides}
    config = dataclasses.replace(BrokerConfig(), **values)
    broker = Broker(log_dir, create=True, config=config)
    try:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
        server.start()
        try:
            print(f"port {server.endpoints[0].port}", flush=True)
            sys.stdin.read()
        finally:
            server.shutdown(5.0)
    finally:
        broker.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))
