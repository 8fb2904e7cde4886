"""Spark finds the ``kafkalog`` source as an installed user has it, from any working directory:
its Python workers list the top-level modules (``pkgutil.iter_modules``) and import
``pyspark_kafkalog``, which the install (``pip install -e .``: a .pth path entry, pyproject's
package-dir) puts on every interpreter's path. A SparkSession of its own, in a child process
started in an empty directory without ``PYTHONPATH``, reads a fixture log dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_paths import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = FIXTURES / "kafka-logdirs" / "kafka-3.7-ldi-poc"
CHILD = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "512m").getOrCreate())
df = spark.read.format("kafkalog").option("path", sys.argv[1]).option("subscribePattern", ".*")
print("rows", df.load().count())
spark.stop()
"""


def installed_origin(cwd: Path, env: dict[str, str]) -> str:
    code = "import importlib.util as u; s = u.find_spec('pyspark_kafkalog'); print(s and s.origin)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.spark
def test_spark_finds_the_source_from_another_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    origin = installed_origin(tmp_path, env)
    if origin == "None" or not Path(origin).is_relative_to(ROOT):
        pytest.skip(
            f"this interpreter's install is not of this checkout (pyspark_kafkalog: "
            f"{origin}); bash dev.sh installs it"
        )
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(LOG_DIR)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "rows 3", done.stdout[-2000:]
