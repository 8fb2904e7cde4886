"""The remote reads' thread pool: a full queue refuses at once, shutdown cancels the queued
reads and ends its daemon threads."""

from __future__ import annotations

import threading

import pytest

from broker_embedded.storage.remote_storage_thread_pool import (
    RemoteReadRejectedError,
    RemoteStorageThreadPool,
)


def test_a_full_queue_refuses_and_shutdown_cancels_what_waits() -> None:
    pool = RemoteStorageThreadPool("readers", threads=1, max_pending=1)
    started, release = threading.Event(), threading.Event()

    def held() -> str:
        started.set()
        assert release.wait(10)
        return "read"

    running = pool.submit(held)
    assert started.wait(10)  # the thread holds it: the queue is empty again
    waiting = pool.submit(lambda: "never")
    with pytest.raises(RemoteReadRejectedError, match="1 remote reads are queued already"):
        pool.submit(lambda: "refused")
    pool.shutdown()
    assert waiting.cancelled()
    release.set()
    assert running.result(10) == "read"
    with pytest.raises(RemoteReadRejectedError, match="shut down"):
        pool.submit(lambda: "late")
    failing = RemoteStorageThreadPool("failing", threads=1, max_pending=1)
    future = failing.submit(lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        future.result(10)
    failing.shutdown()


def test_shutdown_never_waits_with_a_queue_smaller_than_the_pool() -> None:
    """remote.log.reader.max.pending.tasks below remote.log.reader.threads (Kafka allows it):
    shutdown returns while every thread is busy, and each thread ends after its read."""
    pool = RemoteStorageThreadPool("small-queue", threads=3, max_pending=1)
    release = threading.Event()
    started = [threading.Event() for _ in range(3)]

    def held(i: int) -> int:
        started[i].set()
        assert release.wait(10)
        return i

    futures = []
    for i in range(3):
        futures.append(pool.submit(lambda i=i: held(i)))
        assert started[i].wait(10)  # taken: the queue is empty again
    stopper = threading.Thread(target=pool.shutdown, daemon=True)
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive()  # returned while the three reads run
    release.set()
    assert [f.result(10) for f in futures] == [0, 1, 2]
    for t in threading.enumerate():
        if t.name.startswith("small-queue-"):
            t.join(10)
            assert not t.is_alive()
