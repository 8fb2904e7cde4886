"""One fetch ahead (as Kafka's consumer fetcher keeps one): the next fetch of a task runs on one
background thread while the caller decodes the last one. Shared by the fetch sources that
pipeline (client/wire_fetch_source.py, storage/object_store_fetch_source.py).

Invariants: at most one fetch is pending (memory: one more fetch); :meth:`FetchAhead.take`
returns the pending answer only for exactly the fetch it was started for, else waits for it and
drops it, so that the source's connection or store is the caller's thread's again.

Thread safety: one caller thread; the pending fetch runs on the one background thread.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class FetchAhead(Generic[K, T]):
    """The pending fetch of one source; see the module docstring."""

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[K, Future[T]] | None = None

    def start(self, key: K, fetch: Callable[[K], T]) -> None:
        """``fetch(key)`` on the background thread (after a pending fetch ends)."""
        self.settle()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._thread_name)
        self._ahead = (key, self._pool.submit(fetch, key))

    def take(self, key: K) -> Future[T] | None:
        """The pending fetch when it was started for ``key`` (its result or error is the
        caller's); else None, with any other pending fetch waited for and dropped."""
        if self._ahead is not None and self._ahead[0] == key:
            ahead, self._ahead = self._ahead, None
            return ahead[1]
        self.settle()
        return None

    def settle(self) -> None:
        """Wait for a pending fetch and drop it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].exception()  # waits; its answer or error no longer matters

    def close(self) -> None:
        self.settle()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
