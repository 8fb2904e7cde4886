"""Logging of the command line (spark_kafkalog/cli_logging.py): ``--log-level`` and
``--log-format`` on any subcommand, one line per event (tracebacks joined to their line), JSON
lines, ``[log]`` of the broker config for ``kafkalog serve``, and a served broker that logs a
client's garbage in one line without a traceback."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import struct
import time
from pathlib import Path

import pytest

from broker_embedded.storage.log_manager import CLEAN_SHUTDOWN_FILE
from spark_kafkalog import cli_logging

from ._compaction_logdirs import build_compacted
from ._serve_proc import ServeProcess

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
LOGGER = "spark_kafkalog.compaction_job"


@pytest.fixture
def unclean(tmp_path: Path) -> tuple[Path, Path]:
    """A compacted log dir its last owner did not shut down cleanly, and a job config for it
    (the job logs one INFO line when it recovers the dir)."""
    log_dir = tmp_path / "d"
    build_compacted(log_dir, partitions=1, batches=4, extra_topics=False)
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    config = tmp_path / "c.toml"
    config.write_text(f'[compaction]\nlog_dirs = ["{log_dir}"]\n')
    return log_dir, config


def test_log_level_and_format_on_either_side_of_the_subcommand(cli, unclean) -> None:
    log_dir, config = unclean
    message = f"{log_dir} was not shut down cleanly: recovering it before cleaning"
    code, _, err = cli(f"compact --config {config} --dry-run")
    assert (code, err) == (0, "")  # the default level is warning
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    code, _, err = cli(f"--log-format json compact --config {config} --dry-run --log-level info")
    assert code == 0
    (line,) = err.splitlines()
    event = json.loads(line)
    assert re.fullmatch(TIME, event.pop("time"))
    assert event == {"level": "INFO", "logger": LOGGER, "message": message}
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    code, _, err = cli(f"--log-level INFO compact --config {config} --dry-run")
    assert re.fullmatch(f"{TIME} INFO {LOGGER}: {re.escape(message)}\n", err), err
    assert logging.getLogger("spark_kafkalog").level == logging.NOTSET  # put back after main


def test_one_line_per_event_even_with_a_traceback() -> None:
    out = io.StringIO()
    undo = cli_logging.configure("debug", "text", out)
    try:
        log = logging.getLogger("broker_embedded.test_cli_logging")
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            log.exception("handling %s failed", "a request")
        logging.getLogger("py4j.test").info("third-party info: below warning, not shown")
        undo_json = cli_logging.configure("info", "json", out)  # replaces the text handler
        log.warning("line\nbreak")
        undo_json()
    finally:
        undo()
    text, js = out.getvalue().splitlines()
    assert re.fullmatch(
        f"{TIME} ERROR broker_embedded.test_cli_logging: handling a request failed \\| "
        r"Traceback \(most recent call last\): \| .* \| ValueError: bad \| value",
        text,
    ), text
    event = json.loads(js)
    assert (event["level"], event["message"]) == ("WARNING", "line\nbreak")
    assert all(h.get_name() != "kafkalog" for h in logging.getLogger().handlers)


@pytest.mark.parametrize(
    ("table", "error"),
    [
        (
            'level = "loud"',
            "invalid value 'loud' for log config level: one of debug, info, warning, error",
        ),
        ('format = "xml"', "invalid value 'xml' for log config format: text or json"),
        ('colour = "red"', "unknown log config 'colour' (known: format, level)"),
    ],
)
def test_a_bad_log_table_is_one_line(cli, tmp_path: Path, table: str, error: str) -> None:
    conf = tmp_path / "b.toml"
    conf.write_text(f"[log]\n{table}\n")
    code, out, err = cli(f"serve --log-dir {tmp_path / 'd'} --broker-config {conf}")
    assert (code, out, err) == (1, "", f"kafkalog serve: {conf}: {error}\n")
    assert not (tmp_path / "d").exists()


def test_an_interrupt_is_one_line_and_status_130(cli, tmp_path: Path, monkeypatch) -> None:
    class Interrupted(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            raise KeyboardInterrupt

    d = tmp_path / "d"
    assert cli(f"topics create t --log-dir {d}")[0] == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(Interrupted())))
    code, _, err = cli(f"produce --topic t --log-dir {d}")
    assert (code, err) == (
        130,
        "Produced 0 records in 0 batches to topic 't'.\nkafkalog produce: interrupted\n",
    )


def test_serve_logs_json_lines_from_its_config_and_a_bad_client_in_one_line(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('[log]\nlevel = "debug"\nformat = "json"\n')
    stderr = tmp_path / "serve.err"
    with ServeProcess(tmp_path / "d", "--broker-config", conf, stderr=stderr) as served:
        with socket.create_connection(("127.0.0.1", served.ports[0]), timeout=10) as s:
            s.sendall(struct.pack(">i", 12) + b"\xff" * 12)  # no request header parses
            s.settimeout(10)
            assert s.recv(100) == b""  # the server closes the connection
        time.sleep(0.2)
        assert served.terminate() == 0
        lines = served.stderr_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(set(e) == {"time", "level", "logger", "message"} for e in events), lines
    messages = [(e["level"], e["logger"]) for e in events]
    assert ("INFO", "spark_kafkalog.serve_command") in messages
    (bad,) = [e for e in events if "127.0.0.1" in e["message"]]
    assert (bad["level"], bad["logger"]) == ("WARNING", "broker_embedded.server.processor")
    assert bad["message"].startswith("closing connection from 127.0.0.1:"), bad
    assert "Traceback" not in "".join(lines)
