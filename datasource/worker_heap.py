"""The Python heap of one of Spark's reused Python workers, kept cheap for the garbage
collection Spark runs after every call it serves.

A reused Spark Python worker (``spark.python.worker.reuse``, the default: the worker's
environment has ``SPARK_REUSE_WORKER``) runs a full ``gc.collect()`` after each call it serves
(pyspark/daemon.py): each executor task, and each planning call (``schema``, ``reader``,
``writer``). Every collection walks every object the cyclic collector tracks, and this source
leaves many for the life of the process: an executor task about 140,000 (numba and the kernels
it loads from its cache, pyarrow, the storage and record layers), a planning call the option
and planning modules. Walking them again after each task cost 50 to 120 ms of a core per task,
more than a small task's read itself.

:func:`call_started`, called as each such call of this source starts, moves what the process
holds at the start of its second call (the first call's imports and kernels, which Spark's
collection after the first call has already cleaned of garbage) into the collector's permanent
generation (``gc.freeze``), which collections skip. It is done once per process, so that what
later calls leave (caches that grow and shrink) is collected as usual. Reference counting still
frees frozen objects; only a reference cycle among them would stay. In any other process (one
that calls a reader or writer itself, outside Spark's workers) it does nothing.

Thread safety: a Python worker serves one call at a time; the counter is per process.
"""

from __future__ import annotations

import gc
import os

REUSED_WORKER = "SPARK_REUSE_WORKER"  # set by Spark in the environment of its reused workers

_calls = 0


def call_started() -> None:
    """Count a call of this worker process; freeze the heap at the second (docstring)."""
    global _calls
    if not os.environ.get(REUSED_WORKER):  # not a reused Spark worker: leave the heap alone
        return
    _calls += 1
    if _calls == 2:
        gc.freeze()
