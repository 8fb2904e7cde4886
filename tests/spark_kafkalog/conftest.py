"""The demo tests share the data source tests' SparkSession (tests/datasource/conftest.py); the
command line tests share :func:`cli`."""

import io
import shlex
import sys
from pathlib import Path

import pytest

from spark_kafkalog.cli import main
from tests.datasource.conftest import spark  # noqa: F401 (a pytest fixture)


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli("topics list --log-dir D", *more_args, stdin=b"...")``: ``kafkalog`` in-process,
    returning (exit status, stdout, stderr). The command string is split as a shell does."""

    def run(command: str, *more: str | Path, stdin: bytes | None = None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(shlex.split(command) + [str(a) for a in more])
        out, err = capsys.readouterr()
        return code, out, err

    return run
