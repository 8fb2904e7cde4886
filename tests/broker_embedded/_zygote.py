"""The zygote of the crash tests: one Python that forks the processes a test kills with SIGKILL.

A crash test's child module calls :func:`serve` with its workload; the test starts it with
:class:`Zygote` (``python -m <child module>``). The zygote imports the child module (and
whatever warm-up the module does before calling :func:`serve`), prints ``imported``, then for
each line ``LOG_DIR RUN SEED`` on stdin forks a child that runs ``work(LOG_DIR, RUN, SEED)``,
prints ``pid <pid>`` (before the child runs: the child waits for it on a pipe, so that line
comes first), waits for the child to die and prints ``exit <pid> <wait status>``.
Forking from the single-threaded zygote starts a child in a few milliseconds instead of a new
interpreter's 0.3 s or more, so a hundred kills fit in seconds; each child is still its own
process, killed with SIGKILL by its pid.

A child prints ``ready`` once it has opened the log dir, then lines of its own workload; each
line is written with a single ``os.write`` (atomic on a pipe for lines this short), so the
zygote's and the child's lines reach the test whole, in the order written.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# -- the zygote's side --------------------------------------------------------------------------


def serve(work: Callable[[str, int, int], None]) -> None:
    """Fork a child running ``work`` for each ``LOG_DIR RUN SEED`` line on stdin (the module
    docstring's protocol). A child that raises prints its traceback to stderr and exits 1."""
    os.write(1, b"imported\n")
    for command in sys.stdin:
        log_dir, run, seed = command.split()
        named, go = os.pipe()  # the child starts once its pid is said: "pid" is the first line
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go)
                os.read(named, 1)
                os.close(named)
                work(log_dir, int(run), int(seed))
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(1)
        os.close(named)
        os.write(1, b"pid %d\n" % pid)
        with contextlib.suppress(BrokenPipeError):  # the test killed it before it started
            os.write(go, b"g")
        os.close(go)
        _, status = os.waitpid(pid, 0)
        os.write(1, b"exit %d %d\n" % (pid, status))


# -- the test's side ----------------------------------------------------------------------------


class Zygote:
    """The zygote subprocess ``python -m module``, its stderr in ``stderr_path``."""

    def __init__(self, module: str, stderr_path: Path, import_timeout: float = 120.0) -> None:
        self.stderr_path = stderr_path
        self.child: int | None = None  # the pid of the child alive, if any
        self._buf = b""
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=REPO,
            )
        assert self.line(timeout=import_timeout) == b"imported\n", stderr_path.read_text()

    def line(self, timeout: float = 120.0) -> bytes:
        """The next line from the zygote or its child (a hung child fails the test: the
        bound is a hang guard, far above a loaded machine's slowest line)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line in {timeout} s: {self.stderr_path.read_text()}"
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"the zygote died: {self.stderr_path.read_text()}"
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def start(self, log_dir: Path, run: int, seed: int) -> int:
        self.proc.stdin.write(b"%s %d %d\n" % (str(log_dir).encode(), run, seed))
        self.proc.stdin.flush()
        kind, pid = self.line().split()
        assert kind == b"pid"
        self.child = int(pid)
        return self.child

    def kill_child(self) -> list[bytes]:
        """SIGKILL the child; return the lines it wrote, after checking how it ended."""
        assert self.child is not None
        os.kill(self.child, signal.SIGKILL)
        lines = []
        while not (line := self.line()).startswith(b"exit "):
            lines.append(line)
        pid, status = map(int, line.split()[1:])
        assert pid == self.child
        self.child = None
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            self.stderr_path.read_text()
        )
        return lines

    def run_and_kill(
        self, log_dir: Path, run: int, seed: int, rng: random.Random, latest: float
    ) -> list[bytes]:
        """Start a child and SIGKILL it: 5 ms to ``latest`` s after it printed ``ready``, or,
        every tenth run, 0-30 ms after it was started (so also while it opens the log dir).
        Returns the lines it wrote (``ready`` left out where it was waited for)."""
        self.start(log_dir, run, seed)
        lines = []
        if run % 10 == 0:
            time.sleep(rng.uniform(0, 0.03))
        else:
            while (line := self.line()) != b"ready\n":
                lines.append(line)  # only an "exit" line, if the child failed to open
                assert not line.startswith(b"exit"), self.stderr_path.read_text()
            time.sleep(rng.uniform(0.005, latest))
        return lines + self.kill_child()

    def close(self) -> None:
        if self.child is not None:  # a failed check left it running
            os.kill(self.child, signal.SIGKILL)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
