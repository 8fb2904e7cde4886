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
    # compat: a plain path entry, so that PySpark's discovery of the top-level module
    # pyspark_kafkalog (pkgutil.iter_modules) sees it from any working directory
    "$VENV/bin/python" -m pip install -q -e '.[test]' --config-settings editable_mode=compat
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
        ruff check .
        ruff format --check .
        exec python -m pytest -q --durations=25 "$@"
        ;;
    *)
        echo "usage: bash dev.sh demo|test" >&2
        exit 2
        ;;
esac
