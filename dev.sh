#!/usr/bin/env bash
# The project's two commands. Each creates or refreshes .venv (Python 3.10+, pip; 3.11+ for the wire-protocol server) first.
#   bash dev.sh demo   run the main job on an embedded default log dir
#   bash dev.sh test   lint and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ dev.sh -nt "$STAMP" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # editable: pyproject's package-dir makes it a plain .pth path entry, so that PySpark's
    # discovery of pyspark_kafkalog (pkgutil.iter_modules) sees it from any working directory
    "$VENV/bin/python" -m pip install -q -e '.[test]'
    touch "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
# numba's kernels, compiled once into the cache every process loads from (a stat when they are)
python -m spark_kafkalog.kernel_cache
case "${1:-}" in
    demo)
        shift
        exec kafkalog demo "$@"
        ;;
    test)
        shift
        # The suite starts many Python processes (servers, the command line, Spark's
        # workers, children it kills): let them load compiled bytecode from __pycache__ rather
        # than compile every module again, even where the environment turns writing it off
        # (collection alone took 14 s of a core per worker without it, 5 s with it)
        unset PYTHONDONTWRITEBYTECODE
        ruff check .
        ruff format --check .
        # On pytest-xdist workers: KAFKALOG_TEST_WORKERS, by default one more than the cores
        # (with one per core the cores idled a quarter of the time: tests wait for children,
        # kills and the network) and at most one per 2.5 GB of available memory (each starts its
        # own SparkSession and Kafka 3.9 broker, about 2 GB). --dist worksteal: each worker
        # starts on a contiguous share of the tests (a module's tests mostly on one worker, its
        # module fixtures built once) and takes half of another's remaining tests when it runs
        # out, so all stay busy to the end (with loadscope a slow module was one serial chunk).
        # Tiers, by marker (pyproject.toml), e.g.
        #   bash dev.sh test -m "not slow"                  skip the crash, limit and soak tests
        #   bash dev.sh test -m "not spark and not peer"    no JVM at all
        #   bash dev.sh test -m "serve and not slow"        the wire-protocol server
        #   bash dev.sh test -n 0 tests/path::name          one test, in this process
        # Measured: pytest 9.0 min for the whole suite with the Kafka 3.9 peers in a fresh
        # clone, 3 workers on 2 cores (10.1 min with the install and the kernel cache).
        workers=${KAFKALOG_TEST_WORKERS:-}
        if [ -z "$workers" ]; then
            workers=$(($(nproc 2>/dev/null || echo 1) + 1))
            memory_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || true)
            by_memory=$((${memory_kb:-0} / 2621440))  # 2.5 GB each
            if [ -n "$memory_kb" ] && [ "$by_memory" -lt "$workers" ]; then
                workers=$((by_memory > 0 ? by_memory : 1))
            fi
        fi
        exec python -m pytest -q -n "$workers" --dist worksteal \
            --durations=25 "$@"
        ;;
    *)
        echo "usage: bash dev.sh demo|test" >&2
        exit 2
        ;;
esac
