"""The first run of ``kafkalog demo`` on a fresh install against the second, in one run.

    .venv/bin/python benchmarks/first_run.py [--events N]

A fresh install is an empty numba cache: each case below gets a new ``NUMBA_CACHE_DIR`` (a
temporary directory deleted at the end), so nothing compiled by an earlier case or by the
repository's own ``__pycache__`` is reused. Cases, each ``kafkalog demo --events N`` (default
300,000: the demo's default) in a new process:

- without the warm-up: a stamp is put in the empty cache by hand, so ``ensure_compiled`` skips
  and every Spark Python worker compiles the kernels it needs, as before
  ``spark_kafkalog.kernel_cache`` existed;
- with it: ``python -m spark_kafkalog.kernel_cache`` (what ``bash dev.sh`` runs after installing),
  then the demo twice: the first run and the second.

Prints a markdown table: wall seconds of each step and the ratio of each demo run to the second
run with the warm-up (the goal: the first at most 1.3x).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spark_kafkalog import kernel_cache  # noqa: E402


def timed(command: list[str], env: dict[str, str]) -> float:
    began = time.monotonic()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    args = parser.parse_args()
    demo = [sys.executable, "-m", "spark_kafkalog.cli", "demo", "--events", str(args.events)]
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="first-run-") as work:
        base = {k: v for k, v in os.environ.items() if k != "KAFKALOG_KERNEL_STAMP_DIR"}
        base["PYTHONPATH"] = str(ROOT)
        cold = {**base, "NUMBA_CACHE_DIR": str(Path(work, "cold"))}
        os.environ.pop("KAFKALOG_KERNEL_STAMP_DIR", None)
        os.environ.update(NUMBA_CACHE_DIR=cold["NUMBA_CACHE_DIR"])
        kernel_cache.stamp_path().write_text("skipped by benchmarks/first_run.py\n")
        rows.append(
            (
                "demo, empty cache, no warm-up (each worker compiles)",
                timed([*demo, "--dir", str(Path(work, "d0"))], cold),
            )
        )
        warm = {**base, "NUMBA_CACHE_DIR": str(Path(work, "warm"))}
        warm_up = [sys.executable, "-m", "spark_kafkalog.kernel_cache"]
        rows.append(
            ("python -m spark_kafkalog.kernel_cache (bash dev.sh runs it)", timed(warm_up, warm))
        )
        for n in (1, 2):
            rows.append(
                (
                    f"demo, run {n} after the warm-up",
                    timed([*demo, "--dir", str(Path(work, f"d{n}"))], warm),
                )
            )
    second = rows[-1][1]
    load = os.getloadavg()[0]
    print(f"\nkafkalog demo --events {args.events:,}; 2 cores, load average {load:.1f}\n")
    print("| step | wall (s) | / second demo run |")
    print("|---|---:|---:|")
    for name, seconds in rows:
        ratio = f"{seconds / second:.2f}x" if name.startswith("demo") else ""
        print(f"| {name} | {seconds:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
