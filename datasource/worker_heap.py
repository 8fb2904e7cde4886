"""The Python heap of one of Spark's Python workers, kept cheap for the collector Spark runs
after every task.

A reused Spark Python worker (``spark.python.worker.reuse``, the default) runs a full
``gc.collect()`` after each task it ran (pyspark/daemon.py). Every collection walks every object
the cyclic collector tracks, and an executor task of this source leaves about 100,000 of them
for the life of the process: the modules it imports (numba and the kernels it loads from its
cache, pyarrow, the storage and record layers). Walking them again after each task cost 50 to
120 ms of a core per task, more than a small task's read itself.

:func:`task_started`, called as each executor task of this source starts (a Spark task: it
does nothing in a process that calls a reader or writer itself, outside Spark), moves what the
process holds at the start of its second task (the first task's imports and kernels, which
Spark's collection after the first task has already cleaned of garbage) into the collector's
permanent generation (``gc.freeze``), which collections skip. It is done once per process, so
that what later tasks leave (caches that grow and shrink) is collected as usual. Reference
counting still frees frozen objects; only a reference cycle among them would stay.

Thread safety: a Python worker runs one task at a time; the counter is per process.
"""

from __future__ import annotations

import gc

from pyspark import TaskContext

_tasks = 0


def task_started() -> None:
    """Count an executor task of this process; freeze the heap at the second (docstring)."""
    global _tasks
    if TaskContext.get() is None:  # not in a Spark task: leave the process's heap alone
        return
    _tasks += 1
    if _tasks == 2:
        gc.freeze()
