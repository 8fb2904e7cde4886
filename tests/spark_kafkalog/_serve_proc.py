"""A ``kafkalog serve`` child process for the tests: started on 127.0.0.1 port 0, its printed
listener lines parsed, control commands written to its stdin, stopped with SIGTERM (or killed)
within bounds; its log (stderr) goes to a file the tests read.

Every wait is bounded (:data:`START_TIMEOUT_S`, :data:`STOP_TIMEOUT_S`, ``timeout`` arguments);
on exit from the context manager a child still running is killed.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
LISTENING = re.compile(r"^broker (\d+) listening on PLAINTEXT://([^\s:]+):(\d+)$")


def kafkalog_command(*args: str | Path, held: bool = False) -> list[str]:
    """The argv of ``kafkalog ARGS`` run by the test child module (``held``: waiting for
    ``go``, see tests/spark_kafkalog/_serve_child.py)."""
    return [
        sys.executable,
        "-m",
        "tests.spark_kafkalog._serve_child",
        *(["--held"] if held else []),
        *map(str, args),
    ]


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


class ServeProcess:
    """``kafkalog serve --log-dir LOG_DIR --listeners PLAINTEXT://127.0.0.1:0 ARGS``.

    ``held=True``: the process starts and imports the server's modules, and the server starts
    at :meth:`go` (a replacement started while the server it replaces still runs: the log
    dir is not opened before ``go``)."""

    def __init__(
        self, log_dir: Path, *args: str | Path, brokers: int = 1, stderr: Path, held: bool = False
    ) -> None:
        self.brokers = brokers
        self.stderr_path = stderr
        command = kafkalog_command(
            "serve",
            "--log-dir",
            log_dir,
            "--listeners",
            "PLAINTEXT://127.0.0.1:0",
            "--brokers",
            str(brokers),
            *args,
            held=held,
        )
        self._stderr = open(stderr, "ab")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env(),
            cwd=ROOT,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self.ports: dict[int, int] = {}
        if not held:
            self._until_listening()

    def go(self) -> ServeProcess:
        """Start a held server; itself, listening."""
        self._send("go")
        self._until_listening()
        return self

    def _until_listening(self) -> None:
        try:
            self._wait_listening()
        except BaseException:
            self.close()
            raise

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self, timeout: float) -> str:
        """The next line of the child's stdout (AssertionError at EOF or after ``timeout``)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"kafkalog serve printed nothing for {timeout} s") from None
        if line is None:
            raise AssertionError(f"kafkalog serve ended: {self.stderr_text()[-2000:]}")
        return line

    def _wait_listening(self) -> None:
        while len(self.ports) < self.brokers:
            m = LISTENING.match(self.next_line(START_TIMEOUT_S))
            assert m, "unexpected output before the listener lines"
            self.ports[int(m.group(1))] = int(m.group(3))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for _, p in sorted(self.ports.items()))

    def control(self, command: str, timeout: float = STOP_TIMEOUT_S) -> str:
        """Send one control command; its answer line."""
        self._send(command)
        return self.next_line(timeout)

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM; the exit status (AssertionError if it does not exit within ``timeout``)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            message = f"kafkalog serve still running {timeout} s after SIGTERM"
            raise AssertionError(message) from None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
