"""Logging of the ``kafkalog`` commands and the compaction job: ``--log-level`` and
``--log-format`` (every subcommand), and for ``kafkalog serve`` the ``[log]`` table of the broker
config file (``level``, ``format``; the command line wins).

Every module logs to ``logging.getLogger(__name__)``, so the loggers form one hierarchy named
after the modules (``broker_embedded.server.processor``, ``spark_kafkalog.compaction_job``,
...). :func:`configure` puts one handler on the root logger, writing to stderr:

- the project's packages (:data:`PACKAGES`) log at the chosen level; every other library
  (py4j, kafka-python, ...) at WARNING or the chosen level if higher, so ``--log-level debug``
  is kafkalog's debug output, not py4j's;
- one line per event. ``text``: ``2026-11-25T06:15:00.123Z INFO logger.name: message``, a
  traceback (a bug, never a user's or client's mistake) joined to the same line with `` | ``;
  ``json``: one object a line, ``{"time": ..., "level": ..., "logger": ..., "message": ...}``
  plus ``"exception"`` (the traceback as one string) when there is one.

Not a broker config (Kafka keeps its log levels in log4j's file, not server.properties), so
DescribeConfigs does not list it. Thread safety: call :func:`configure` once, before threads
start (logging itself is thread-safe).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from broker_embedded.broker_config import read_toml
from broker_embedded.storage.log_config import InvalidConfigError

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
PACKAGES = ("broker_embedded", "datasource", "spark_kafkalog", "pyspark_kafkalog")
_HANDLER_NAME = "kafkalog"


def add_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--log-level`` and ``--log-format`` on ``parser``; with ``suppress`` an absent option
    leaves what the main parser set (for subcommands)."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        type=str.lower,
        default=default,
        help="kafkalog's log level (default: warning; serve: info, or [log] level)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=default,
        help="log lines on stderr: text (default) or json, one object a line",
    )


def add_to_every_subcommand(parser: argparse.ArgumentParser) -> None:
    """:func:`add_arguments` (suppressed) on every subcommand parser below ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if "--log-level" not in sub._option_string_actions:
                    add_arguments(sub, suppress=True)
                add_to_every_subcommand(sub)


def load_log_settings(path: Path | None) -> tuple[str | None, str | None]:
    """``(level, format)`` of a broker config file's ``[log]`` table (None: not set)."""
    if path is None:
        return None, None
    return from_table(read_toml(path, "broker config file").get("log", {}), str(path))


def from_table(table: Any, source: str) -> tuple[str | None, str | None]:
    """``(level, format)`` of a broker config file's ``[log]`` table; errors name the file."""
    if not isinstance(table, Mapping):
        raise InvalidConfigError(f"{source}: [log] must be a table")
    unknown = set(table) - {"level", "format"}
    if unknown:
        raise InvalidConfigError(
            f"{source}: unknown log config {sorted(unknown)[0]!r} (known: format, level)"
        )
    level, fmt = table.get("level"), table.get("format")
    if level is not None and (not isinstance(level, str) or level.lower() not in LEVELS):
        raise InvalidConfigError(
            f"{source}: invalid value {level!r} for log config level: one of {', '.join(LEVELS)}"
        )
    if fmt is not None and fmt not in FORMATS:
        raise InvalidConfigError(
            f"{source}: invalid value {fmt!r} for log config format: text or json"
        )
    return (None if level is None else level.lower()), fmt


def configure(
    level: str = "warning", fmt: str = "text", stream: TextIO | None = None
) -> Callable[[], None]:
    """The module docstring's setup (replacing the handler an earlier call installed); returns
    a function that puts the levels and handlers back as they were (for in-process callers)."""
    number = logging.getLevelName(level.upper())
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(p) for p in PACKAGES)]
    levels = [lg.level for lg in loggers]
    ours = [h for h in root.handlers if h.get_name() == _HANDLER_NAME]
    for h in ours:
        root.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else TextLineFormatter())
    root.addHandler(handler)
    root.setLevel(max(number, logging.WARNING))
    for package in loggers[1:]:
        package.setLevel(number)

    def undo() -> None:
        root.removeHandler(handler)
        for h in ours:
            root.addHandler(h)
        for lg, old in zip(loggers, levels, strict=True):
            lg.setLevel(old)

    return undo


def utc_time(epoch: float) -> str:
    """``2026-11-25T06:15:00.123Z``: UTC, ISO 8601, milliseconds (the logs and reports)."""
    ms = int(epoch * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class TextLineFormatter(logging.Formatter):
    """``TIME LEVEL logger: message``, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{utc_time(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        extra = _exception(self, record)
        return " | ".join((line + (" | " + extra if extra else "")).splitlines())


class JsonLineFormatter(logging.Formatter):
    """One JSON object a line (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = _exception(self, record)
        if extra:
            obj["exception"] = extra
        return json.dumps(obj, ensure_ascii=False)


def _exception(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    text = formatter.formatException(record.exc_info) if record.exc_info else ""
    if record.stack_info:
        text = (text + "\n" if text else "") + formatter.formatStack(record.stack_info)
    return text
