"""The log dir ``.lock``: exclusive within a process and across processes, the holder named in
the refusal, release (explicit, context manager, death of the holder by SIGKILL)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_embedded.errors import KafkaLogError, LogDirLockedError
from broker_embedded.storage.log_dir_lock import LOCK_FILE_NAME, LogDirLock

ROOT = Path(__file__).resolve().parents[3]
HOST = socket.gethostname()

# Takes the lock, says so, then on "release" releases it; exits at the end of its stdin.
CHILD = """
import sys
from broker_embedded.storage.log_dir_lock import LogDirLock
lock = LogDirLock.acquire(sys.argv[1], "test child")
print("locked", flush=True)
for line in sys.stdin:
    if line.strip() == "release":
        lock.release()
        print("released", flush=True)
"""


class Child:
    """A separate Python process holding the lock of a log dir."""

    def __init__(self, log_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(log_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.expect("locked")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, line: str) -> None:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got == line, f"child said {got!r}, exit code {self.proc.poll()}"

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("release\n")
        self.proc.stdin.flush()
        self.expect("released")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    c = Child(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_acquire_creates_the_lock_file_naming_its_owner(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path, "kafkalog broker 0") as lock:
        assert lock.is_held
        assert lock.path == tmp_path / LOCK_FILE_NAME
        expected = f"pid {os.getpid()} on host {HOST} (kafkalog broker 0)\n"
        assert lock.path.read_text() == expected
    assert not lock.is_held
    assert lock.path.exists()  # the file stays, as Kafka's does
    assert lock.path.read_bytes() == b""  # its owner text is cleared


def test_owner_text_is_one_bounded_line(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path, "a\nb\x00c" + "x" * 500) as lock:
        text = lock.path.read_text()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "(a b c" in text and len(text) < 300
    with LogDirLock.acquire(tmp_path) as lock:
        assert lock.path.read_text() == f"pid {os.getpid()} on host {HOST}\n"


def test_a_second_lock_in_the_same_process_is_refused(tmp_path: Path) -> None:
    first = LogDirLock.acquire(tmp_path, "kafkalog broker 0")
    with pytest.raises(LogDirLockedError) as refused:
        LogDirLock.acquire(tmp_path, "kafkalog broker 1")
    assert str(refused.value) == (
        f"log dir {tmp_path} is locked by pid {os.getpid()} on host {HOST} (kafkalog broker 0): "
        "another LogDirLock in this process owns it for writing"
    )
    assert first.is_held
    assert "(kafkalog broker 0)" in first.path.read_text()  # the refused one wrote nothing
    first.release()
    with LogDirLock.acquire(tmp_path, "kafkalog broker 1") as second:
        assert "(kafkalog broker 1)" in second.path.read_text()


def test_release_is_idempotent(tmp_path: Path) -> None:
    lock = LogDirLock.acquire(tmp_path)
    lock.release()
    lock.release()
    with lock:
        pass
    assert not LogDirLock.is_locked(tmp_path)


def test_is_locked_probes_without_keeping_or_creating(tmp_path: Path) -> None:
    assert not LogDirLock.is_locked(tmp_path)
    assert not (tmp_path / LOCK_FILE_NAME).exists()
    with LogDirLock.acquire(tmp_path):
        assert LogDirLock.is_locked(tmp_path)
        assert LogDirLock.is_locked(tmp_path)
    assert not LogDirLock.is_locked(tmp_path)
    with LogDirLock.acquire(tmp_path):  # the probe kept nothing
        pass


def test_a_holder_that_wrote_nothing_yet_is_unknown(tmp_path: Path) -> None:
    fd = os.open(tmp_path / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(LogDirLockedError, match="locked by an unknown holder"):
            LogDirLock.acquire(tmp_path)
    finally:
        os.close(fd)


def test_a_missing_log_dir_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(KafkaLogError, match=f"log dir {missing}") as e:
        LogDirLock.acquire(missing)
    assert not isinstance(e.value, LogDirLockedError)


def test_another_process_holding_it_is_named(tmp_path: Path, child: Child) -> None:
    with pytest.raises(LogDirLockedError) as refused:
        LogDirLock.acquire(tmp_path, "kafkalog broker 0")
    message = str(refused.value)
    assert message == (
        f"log dir {tmp_path} is locked by pid {child.pid} on host {HOST} (test child): "
        "another process owns it for writing"
    )
    assert LogDirLock.is_locked(tmp_path)


def test_acquire_after_the_other_process_releases(tmp_path: Path, child: Child) -> None:
    with pytest.raises(LogDirLockedError):
        LogDirLock.acquire(tmp_path)
    child.release()
    assert not LogDirLock.is_locked(tmp_path)
    with LogDirLock.acquire(tmp_path, "after") as lock:
        assert "(after)" in lock.path.read_text()


def test_the_lock_dies_with_a_sigkilled_holder(tmp_path: Path, child: Child) -> None:
    with pytest.raises(LogDirLockedError, match=f"pid {child.pid} "):
        LogDirLock.acquire(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    assert child.proc.wait(timeout=10) == -signal.SIGKILL
    assert "(test child)" in (tmp_path / LOCK_FILE_NAME).read_text()  # stale text, no lock
    assert not LogDirLock.is_locked(tmp_path)
    with LogDirLock.acquire(tmp_path, "successor") as lock:
        assert lock.path.read_text() == f"pid {os.getpid()} on host {HOST} (successor)\n"


def test_a_child_process_cannot_take_a_lock_this_process_holds(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path, "parent"):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=30,
        )
    assert proc.returncode != 0
    assert f"LogDirLockedError: log dir {tmp_path} is locked by pid {os.getpid()}" in proc.stderr
    assert "(parent): another process owns it" in proc.stderr
