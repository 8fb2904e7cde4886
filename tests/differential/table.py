"""The differential table: every scenario run on Kafka 3.9 and on kafkalog (the secured ones
on a SASL/SCRAM listener with an authorizer, a second pair of servers), printed as a
Markdown table of API x version: the fields compared, equal and differing, each difference
named (tests/differential/allowed.py; "UNEXPLAINED" for one no entry allows).

    KAFKALOG_PEERS=... python -m tests.differential.table

Starts two Kafka 3.9 (``KAFKALOG_PEERS``, see tests/kafka39.py) and two kafkalog servers in
temporary folders. "differing" counts differing fields (an entry only one side has counts
once); one row per API, each difference named with the versions it shows in.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from broker_embedded.protocol.schemas import api_name
from tests.differential.allowed import allowed_for
from tests.differential.harness import Login, leaves
from tests.differential.scenario import Scenario, compare
from tests.differential.scenarios import SCENARIOS
from tests.differential.secured_scenarios import ADMIN, SECURED_SCENARIOS
from tests.differential.servers import kafkalog_server


@dataclass
class Row:
    compared: int = 0
    differing: int = 0
    names: set[str] = field(default_factory=set)


def collect(
    kafka: str,
    kafkalog: str,
    scenarios: dict[str, Scenario] = SCENARIOS,
    login: Login | None = None,
    rows: dict[tuple[int, int], Row] | None = None,
) -> dict[tuple[int, int], Row]:
    """(API key, version) -> what its answers showed, over every scenario (added to
    ``rows``)."""
    rows = defaultdict(Row) if rows is None else rows
    for name, scenario in scenarios.items():
        result = compare(scenario, kafka, kafkalog, login)
        for exchange in result.kafka:
            rows[exchange.api_key, exchange.version].compared += leaves(exchange.answer)
        for d in result.differences:
            row = rows[d.api_key, d.version]
            row.differing += 1
            allowed = allowed_for(name, d)
            row.names.add(allowed.name if allowed else f"UNEXPLAINED {d.difference.path}")
    return rows


def render(rows: dict[tuple[int, int], Row]) -> str:
    """The Markdown table: one row per API, each difference with the versions it shows in."""
    lines = [
        "| API | versions | fields compared | equal | differing | differences |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted({k for k, _ in rows}, key=api_name):
        versions = sorted(v for k, v in rows if k == key)
        compared = sum(rows[key, v].compared for v in versions)
        differing = sum(rows[key, v].differing for v in versions)
        names = sorted({n for v in versions for n in rows[key, v].names})
        shown = ", ".join(
            f"{n} ({spans([v for v in versions if n in rows[key, v].names])})" for n in names
        )
        equal = max(compared - differing, 0)
        lines.append(
            f"| {api_name(key)} | {spans(versions)} | {compared} | {equal} | "
            f"{differing} | {shown or 'none'} |"
        )
    return "\n".join(lines)


def spans(versions: list[int]) -> str:
    """``[0, 1, 2, 4]`` as "v0-2, v4"."""
    out: list[list[int]] = []
    for v in versions:
        if out and out[-1][-1] == v - 1:
            out[-1].append(v)
        else:
            out.append([v])
    return ", ".join(f"v{s[0]}" if len(s) == 1 else f"v{s[0]}-{s[-1]}" for s in out)


def main() -> int:
    from tests.kafka39 import kafka_broker, secured_kafka_broker

    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        (root / "kafka").mkdir()
        with kafka_broker(root / "kafka") as kafka, kafkalog_server(root / "kafkalog") as ours:
            rows = collect(kafka.bootstrap, ours)
        with (
            secured_kafka_broker(root / "kafka-secured", *ADMIN) as kafka,
            kafkalog_server(root / "kafkalog-secured", ADMIN) as ours,
        ):
            collect(kafka.bootstrap, ours, SECURED_SCENARIOS, ADMIN, rows)
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
