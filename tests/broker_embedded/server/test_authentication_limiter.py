"""The failed-authentication limits (security/authentication_limiter.py: kafkalog's own) on a
served SASL_PLAINTEXT listener: SCRAM exchanges by scramp over the wire (to time each answer)
and confluent-kafka's client (librdkafka's SCRAM) refused by a lockout; then the limiter's
bookkeeping with its own clock (the window, the bound on what it remembers).

Every client here connects from 127.0.0.1, so the per-address limit is set high where a test
is about the principal's.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker_embedded.broker import Broker
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import broker_server
from broker_embedded.server.metrics_endpoint import KafkaCollector
from broker_embedded.server.security import authentication_limiter as limiter_module
from broker_embedded.server.security.authentication_limiter import (
    AuthenticationLimitedError,
    AuthenticationLimiter,
    LimiterConfig,
)
from broker_embedded.server.security.security_config import SecurityConfig
from tests.broker_embedded.server._net import config
from tests.broker_embedded.server._pki import PASSWORD, USER, add_user, port, secured
from tests.broker_embedded.server.test_security import Wire, scram

SASL = ["SASL_PLAINTEXT://127.0.0.1:0"]
BASE_MS, MAX_MS = 100, 800
FAILED = ErrorCode.sasl_authentication_failed


@contextlib.contextmanager
def served(tmp_path: Path, **limits: int) -> Iterator[BrokerServer]:
    values = {
        "connection_failed_authentication_delay_ms": BASE_MS,
        "authentication_failure_max_delay_ms": MAX_MS,
        "authentication_failure_limit_per_host": 1000,
        **limits,
    }
    with secured(tmp_path, SecurityConfig(**values), SASL) as server:
        add_user(tmp_path, "bob", "bob-pw")
        yield server


def timed(server: BrokerServer, user: str, password: str) -> tuple[ErrorCode, str, float]:
    """One SCRAM-SHA-256 exchange on a new connection: its code, message and seconds from the
    client-final to its answer."""
    wire = Wire(port(server, "SASL_PLAINTEXT"))
    try:
        started = time.monotonic()
        answer = scram(wire, "SCRAM-SHA-256", user, password)
        return answer.error_code, answer.error_message or "", time.monotonic() - started
    finally:
        wire.close()


def test_the_delay_doubles_then_the_principal_is_locked_out(tmp_path, caplog):
    caplog.set_level(logging.WARNING, limiter_module.__name__)
    with served(
        tmp_path, authentication_failure_limit_per_principal=4, authentication_lockout_ms=60_000
    ) as server:
        answers = [timed(server, USER, "guess") for _ in range(4)]
        assert [code for code, _, _ in answers] == [FAILED] * 4
        for (_, _, seconds), delay_ms in zip(answers, (100, 200, 400, 800), strict=True):
            assert delay_ms / 1000 <= seconds < delay_ms / 1000 + 5  # a loaded machine is slow
        code, message, seconds = timed(server, USER, PASSWORD)  # the right password
        assert code == FAILED
        assert re.fullmatch(
            r"Authentication failed: too many failed authentications for user "
            r"'alice' \(locked for (59|60) more seconds\)",
            message,
        )
        assert seconds >= MAX_MS / 1000
        assert timed(server, "bob", "bob-pw")[0] == ErrorCode.none  # another principal
    locks = [r.getMessage() for r in caplog.records if r.name == limiter_module.__name__]
    assert locks == [
        "authentication: user 'alice' locked for 60 s after 4 failed authentications in 60 s "
        "(the last as user 'alice' from 127.0.0.1)"
    ]


def test_a_right_password_waits_like_a_wrong_one_while_its_principal_is_guessed(tmp_path):
    # a base delay of 1 s: "at once" (under 1 s, what even one failure waits) holds on a busy
    # machine, where a whole SCRAM exchange took up to 0.2 s
    with served(
        tmp_path,
        authentication_failure_limit_per_principal=10,
        connection_failed_authentication_delay_ms=1000,
        authentication_failure_max_delay_ms=8000,
    ) as server:
        assert timed(server, "bob", "bob-pw")[2] < 1.0  # nobody guessing: at once
        assert timed(server, USER, "guess")[0] == FAILED
        code, _, seconds = timed(server, USER, PASSWORD)
        assert code == ErrorCode.none
        assert seconds >= 2.0  # what a second failure would wait: 1 s x 2^1
        assert timed(server, "bob", "bob-pw")[2] < 1.0  # bob is not guessed


def test_an_address_is_locked_out_after_guesses_of_many_principals(tmp_path):
    with served(
        tmp_path,
        authentication_failure_limit_per_host=3,
        authentication_failure_limit_per_principal=0,
    ) as server:
        for user in ("u1", "u2", "u3"):
            assert timed(server, user, "guess")[0] == FAILED
        code, message, _ = timed(server, "bob", "bob-pw")
        assert code == FAILED
        assert re.fullmatch(
            r"Authentication failed: too many failed authentications for address '127.0.0.1' "
            r"\(locked for (299|300) more seconds\)",
            message,
        )


def test_confluent_kafka_is_refused_while_locked_out(tmp_path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with served(tmp_path, authentication_failure_limit_per_principal=2) as server:
        for _ in range(2):
            assert timed(server, USER, "guess")[0] == FAILED
        errors: list[str] = []
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port(server, 'SASL_PLAINTEXT')}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
                "error_cb": lambda e: errors.append(e.str()),
            }
        )
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=10)
        deadline = time.monotonic() + 30
        refused = (
            "SASL authentication error: Authentication failed: too many failed authentications "
            "for user 'alice'"
        )
        while not any(refused in e for e in errors) and time.monotonic() < deadline:
            admin.poll(0.5)  # serves error_cb
        assert any(refused in e for e in errors)


def test_the_counts_are_metrics(tmp_path):
    broker = Broker(tmp_path, create=True, config=config())
    add_user(tmp_path)
    sec = SecurityConfig(
        connection_failed_authentication_delay_ms=10, authentication_failure_limit_per_principal=2
    )
    server = broker_server(broker, SASL, security=sec).start()
    try:
        codes = [timed(server, USER, "guess")[0] for _ in range(3)]  # the third: refused
        collector = KafkaCollector(lambda: server, lambda: broker)
        samples = {
            s.name: s.value
            for m in collector.collect()
            for s in m.samples
            if s.name.startswith("kafkalog_authentication")
        }
    finally:
        server.shutdown(5.0)
        broker.close()
    assert codes == [FAILED] * 3
    assert samples == {
        "kafkalog_authentication_failures_total": 2,
        "kafkalog_authentication_refusals_total": 1,
        "kafkalog_authentication_lockouts_total": 1,
        "kafkalog_authentication_locked": 1,
    }


# -- the limiter's bookkeeping, on its own clock ------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_expire_with_their_window_and_a_lockout_ends():
    clock = Clock()
    limiter = AuthenticationLimiter(LimiterConfig(0.1, 5.0, 60.0, 300.0, 3, 0), clock)
    assert [limiter.failed("u", "h") for _ in range(2)] == [0.1, 0.2]
    clock.now += 60  # the window passed: counting starts again
    assert limiter.failed("u", "h") == 0.1
    assert [limiter.failed("u", "h") for _ in range(2)] == [0.2, 0.4]  # the third: locked
    with pytest.raises(AuthenticationLimitedError, match="locked for 300 more seconds"):
        limiter.admit("u", "other-host")
    assert limiter.failed("u", "h", refused=True) == 5.0  # not counted
    assert limiter.counts() == limiter_module.LimiterCounts(5, 1, 1, 1)
    clock.now += 300
    limiter.admit("u", "h")  # the lockout is over
    assert limiter.counts().locked == 0


def test_off_at_zero_limits_as_kafka():
    limiter = AuthenticationLimiter(LimiterConfig(0.1, 0.1, 60.0, 300.0, 0, 0))
    assert {limiter.failed("u", "h") for _ in range(50)} == {0.1}
    limiter.admit("u", "h")
    assert limiter.succeeded("u") == 0.1  # still as long as a failure, while guessed


def test_made_up_names_cost_bounded_memory():
    limiter = AuthenticationLimiter(LimiterConfig())
    for n in range(limiter_module.MAX_TRACKED + 1000):
        limiter.failed(f"user-{n}", "h")
    assert len(limiter._keys) == limiter_module.MAX_TRACKED
    assert ("address", "h") in limiter._keys  # the most recent failure is kept
