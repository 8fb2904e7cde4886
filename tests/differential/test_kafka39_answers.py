"""The same requests to Kafka 3.9 and to kafkalog get the same answers, field by field, up to
what must differ (tests/differential/harness.py) and the differences allowed, each named and
explained (tests/differential/allowed.py; docs/serving/compared-with-kafka.md)."""

from __future__ import annotations

import pytest

from tests.differential.allowed import ALLOWED, allowed_for
from tests.differential.scenario import compare
from tests.differential.scenarios import SCENARIOS


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_answers_as_kafka_39(name: str, kafka39, kafkalog_bootstrap: str) -> None:
    found = compare(SCENARIOS[name], kafka39.bootstrap, kafkalog_bootstrap).differences
    unexplained = [d.key() for d in found if allowed_for(name, d) is None]
    assert unexplained == [], f"{len(unexplained)} differences not in allowed.py"
    stale = [
        a for a in ALLOWED if a.scenario == name and not any(a.matches(name, d) for d in found)
    ]
    assert stale == [], "allowed differences Kafka and kafkalog no longer show"
