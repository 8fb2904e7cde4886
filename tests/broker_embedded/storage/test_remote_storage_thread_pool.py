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
