"""On a SASL/SCRAM listener with an authorizer, the same requests to Kafka 3.9 and to kafkalog
get the same answers, up to what must differ and the differences allowed (allowed.py)."""

from __future__ import annotations

import pytest

from tests.differential.allowed import ALLOWED, allowed_for
from tests.differential.scenario import compare
from tests.differential.secured_scenarios import ADMIN, SECURED_SCENARIOS


@pytest.mark.parametrize("name", list(SECURED_SCENARIOS))
def test_secured_answers_as_kafka_39(
    name: str, kafka39_secured: str, kafkalog_secured: str
) -> None:
    found = compare(SECURED_SCENARIOS[name], kafka39_secured, kafkalog_secured, ADMIN).differences
    unexplained = [d.key() for d in found if allowed_for(name, d) is None]
    assert unexplained == [], f"{len(unexplained)} differences not in allowed.py"
    stale = [
        a for a in ALLOWED if a.scenario == name and not any(a.matches(name, d) for d in found)
    ]
    assert stale == [], "allowed differences Kafka and kafkalog no longer show"
