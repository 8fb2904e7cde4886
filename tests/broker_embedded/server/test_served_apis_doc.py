"""The table of served APIs in docs/serving/index.md is the server's own ApiVersions table: a
served broker with a SASL listener and the authorizer on (so that every API is registered) is
asked for its ranges, and the docs' rows must be exactly those, so the page cannot drift from
the handlers' registrations."""

from __future__ import annotations

import re
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.protocol.schemas import api_name
from broker_embedded.server.handlers import broker_server
from broker_embedded.server.security.security_config import SecurityConfig
from tests.broker_embedded.server._net import config

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "serving" / "index.md"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ROW = re.compile(r"^\| (\d+) \| (\w+) \| v(\d+)-(\d+) \|", re.M)


def served_ranges(log_dir: Path) -> list[tuple[int, str, int, int]]:
    broker = Broker(log_dir, create=True, config=config())
    try:
        security = SecurityConfig(authorizer_class_name=AUTHORIZER)
        server = broker_server(broker, ["SASL_PLAINTEXT://127.0.0.1:0"], security=security)
        return [
            (r.api_key, api_name(r.api_key), r.min_version, r.max_version)
            for r in sorted(server.versions.ranges(), key=lambda r: r.api_key)
        ]
    finally:
        broker.close()


def test_the_docs_table_is_the_servers(tmp_path: Path) -> None:
    documented = [
        (int(k), name, int(lo), int(hi)) for k, name, lo, hi in ROW.findall(PAGE.read_text())
    ]
    assert documented == served_ranges(tmp_path)
