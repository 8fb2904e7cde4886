"""Where the test fixtures are: tests/fixtures, real material written by Kafka and its clients
(tests/fixtures/README.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
