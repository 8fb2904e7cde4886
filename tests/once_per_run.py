"""A module fixture's work done once per test run, whichever pytest-xdist workers need it.

Why: under ``--dist worksteal`` a worker that runs out of tests takes some of another's, and
they may be tests of a module whose module fixture the other worker already built: the fixture
is built again (the soak's Spark child, about a minute of CPU, ran twice in a run).

:func:`once_per_run` runs ``make(folder)`` in the first worker that asks, under an exclusive
``fcntl.flock`` on a lock file in the run's temporary root (the folder the workers' own
temporary folders are in, made fresh for each run), and stores its result (pickled) beside it;
a worker that asks later, or meanwhile (it waits for the lock), loads that result. A ``make``
that raises stores nothing: the next worker runs it again, in a fresh folder (and fails the
same way, as its tests should). Without xdist the work is simply done.

What ``make`` returns must pickle, and what it leaves in ``folder`` is shared: the tests must
only read it (copy it to change it).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """``make(folder)``'s result, ``make`` run once per run (module docstring); ``name`` names
    the work (a folder of that name holds what it leaves)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(factory.mktemp(name))
    root = factory.getbasetemp().parent  # the run's, shared by its workers
    result = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        # bounded by the other worker's make (each bounds its own waits)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            return pickle.loads(result.read_bytes())
        value = make(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)))
        staged = result.with_suffix(".tmp")
        staged.write_bytes(pickle.dumps(value))
        staged.rename(result)
        return value
