"""``kafkalog serve`` with a SASL_SSL listener from the ``[security]`` table of
``--broker-config``, users managed with ``kafkalog users`` while it runs, and the
``--bootstrap-server`` commands authenticating with ``--command-config`` (Kafka's client
properties file), as docs/serving/security.md's SASL_SSL example runs them."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")

from spark_kafkalog import cli  # noqa: E402
from tests.broker_embedded.server._pki import PASSWORD, USER, make_pki  # noqa: E402
from tests.spark_kafkalog._serve_proc import ServeProcess  # noqa: E402

SASL_SSL_LINE = re.compile(r"^broker 0 listening on SASL_SSL://127\.0\.0\.1:(\d+)$")


def write_configs(tmp_path: Path, password: str) -> tuple[Path, Path]:
    pki = make_pki(tmp_path)
    broker = tmp_path / "broker.toml"
    broker.write_text(
        "[security]\n"
        f'"ssl.keystore.location" = "{pki.server}"\n'
        '"sasl.enabled.mechanisms" = "SCRAM-SHA-512"\n'
    )
    client = tmp_path / "client.properties"
    client.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={pki.ca}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{USER}" password="{password}";\n'
    )
    return broker, client


def run_cli(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()  # produce/consume use .buffer
    old = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(args)
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    out.flush()
    return code, out.buffer.getvalue().decode(), err.getvalue()  # type: ignore[attr-defined]


def test_serve_sasl_ssl_with_users_and_command_config(tmp_path: Path) -> None:
    broker_toml, client_props = write_configs(tmp_path, PASSWORD)
    log_dir = tmp_path / "logs"
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    with ServeProcess(
        log_dir,
        "--listeners",
        listeners,
        "--broker-config",
        broker_toml,
        stderr=tmp_path / "serve.log",
    ) as server:
        m = SASL_SSL_LINE.match(server.next_line(10))
        assert m, "no SASL_SSL listener line"
        bootstrap = ["--bootstrap-server", f"127.0.0.1:{m.group(1)}"]
        secured = [*bootstrap, "--command-config", str(client_props)]
        # no such user yet: refused in one line naming the broker
        code, _, err = run_cli(["topics", "list", *secured])
        assert code == 1 and "authentication with broker 127.0.0.1:" in err
        assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err
        assert (
            run_cli(
                ["users", "add", "--log-dir", str(log_dir), "--user", USER, "--password", PASSWORD]
            )[0]
            == 0
        )
        assert run_cli(["topics", "create", *secured, "t", "--partitions", "1"])[0] == 0
        code, _, err = run_cli(["produce", *secured, "--topic", "t"], stdin="a\nb\nc\n")
        assert code == 0, err
        code, out, err = run_cli(["consume", *secured, "--topic", "t", "--from-beginning"])
        assert (code, out) == (0, "a\nb\nc\n"), err
        # without the command config the SASL_SSL port is not spoken to
        assert run_cli(["topics", "list", *bootstrap])[0] == 1
        assert run_cli(["users", "delete", "--log-dir", str(log_dir), "--user", USER])[0] == 0
        code, _, err = run_cli(["topics", "list", *secured])
        assert code == 1 and "authentication with broker" in err
        assert server.terminate() == 0
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_command_config_without_bootstrap_server_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run_cli(
        [
            "topics",
            "list",
            "--log-dir",
            str(tmp_path),
            "--command-config",
            str(tmp_path / "c.properties"),
        ]
    )
    assert (code, err) == (
        2,
        "kafkalog topics list: --command-config needs --bootstrap-server "
        "(it configures the client)\n",
    )


def test_command_config_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    code, _, err = run_cli(
        ["topics", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(bad)]
    )
    assert code == 1
    assert err == (
        f"kafkalog topics list: --command-config {bad}: sasl.mechanism='GSSAPI' is not supported "
        "(one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)\n"
    )
