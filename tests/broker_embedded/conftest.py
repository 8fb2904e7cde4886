"""Fixtures of the broker tests: a fresh log dir and a standalone broker on it."""

from __future__ import annotations

import pytest

from broker_embedded.broker import Broker


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "logs"


@pytest.fixture
def broker(log_dir):
    b = Broker(log_dir, create=True)
    yield b
    b.close()
