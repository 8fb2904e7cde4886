"""What decode.py and encode.py share: the compile and warm-up times of a module's numba kernels.

A module here is one of ``broker_embedded.record``'s compiled codecs: it has a ``warm_up()``
that compiles (or loads from numba's cache) and runs its kernels once and returns the seconds
it took. Imported by the benchmarks after they put the repository on ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def compile_times(module: str) -> tuple[float, float]:
    """Numba's cold compile (empty cache) and its load from that cache, each in a new process,
    of ``module``'s kernels (a module name such as ``broker_embedded.record.columnar_decoder``)."""
    package, _, name = module.rpartition(".")
    code = f"from {package} import {name} as c; print(c.warm_up())"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        runs = [
            subprocess.run(
                [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
            )
            for _ in range(2)
        ]
    cold, cached = (float(run.stdout.split()[-1]) for run in runs)
    return cold, cached


def print_warm_up(module: ModuleType, skip_compile_time: bool) -> None:
    """Print ``module``'s compile times (unless skipped), then warm it up in this process."""
    if not skip_compile_time:
        cold, cached = compile_times(module.__name__)
        print(f"numba kernels: cold compile {cold:.1f} s, load from cache {cached:.2f} s")
    print(f"numba warm-up in this process: {module.warm_up():.2f} s (not timed below)")
