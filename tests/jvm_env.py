"""The environment the suite's JVMs and Spark's Python workers start in: set once by the test
run's first process (tests/conftest.py's ``pytest_configure``), inherited by pytest-xdist's
workers and by every process a test starts (Spark sessions and children, Kafka 3.9 brokers and
tools). It changes how fast processes start and where they leave temporary files, never what
they do:

- ``JDK_JAVA_OPTIONS``: every JVM runs the JIT's first tier only (``-XX:TieredStopAtLevel=1``).
  The suite's JVMs live seconds to minutes on small inputs, and the second tier compiled the
  same code again at a core's cost (a Kafka 3.9 broker's start and two of its tools: 7.1
  CPU-seconds with both tiers, 4.6 with the first). Their ``java.io.tmpdir`` is the run's
  folder: what a JVM leaves there (Spark's block manager and artifact folders, the native
  libraries lz4-java and snappy-java unpack) stays when a test kills the JVM, and is removed
  with the folder rather than left in the machine's ``/tmp``. A ``JDK_JAVA_OPTIONS`` already
  set is kept.
- ``SPARK_HOME``: a folder of links to the installed PySpark's folders (``bin``, ``jars``, ...)
  without ``python/``. A pip-installed PySpark's JVM puts ``python/lib/pyspark.zip`` and
  py4j's zip first on its Python workers' ``PYTHONPATH``, and Python compiles modules imported
  from a zip at every import (it keeps no bytecode for them): each of Spark's Python worker
  processes spent about 0.4 s of a core compiling PySpark, and the suite starts hundreds. With
  the zips absent the workers import the same PySpark from site-packages, with its bytecode. A
  ``SPARK_HOME`` already set (a Spark install of the user's) is kept.

The run's folder is made fresh by the run's first process and removed by it at the end (never
by a worker or a pytest child that inherited it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

JIT_FIRST_TIER = "-XX:TieredStopAtLevel=1"
_made: list[Path] = []  # the run's folder, in the process that made it


def set_up() -> None:
    """Set the environment of the module docstring, unless it is set."""
    java_options = "JDK_JAVA_OPTIONS" not in os.environ
    spark_home = "SPARK_HOME" not in os.environ
    if not (java_options or spark_home):
        return
    run = Path(tempfile.mkdtemp(prefix="kafkalog-test-run-"))
    _made.append(run)
    if java_options:
        (run / "java-tmp").mkdir()
        os.environ["JDK_JAVA_OPTIONS"] = f"{JIT_FIRST_TIER} -Djava.io.tmpdir={run / 'java-tmp'}"
    if spark_home and link_spark_home(run / "spark-home"):
        os.environ["SPARK_HOME"] = str(run / "spark-home")


def tear_down() -> None:
    """Remove the run's folder, in the process that made it."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def link_spark_home(home: Path) -> bool:
    """Make ``home`` a folder linking every entry of the installed PySpark but ``python/``;
    False without PySpark."""
    try:
        import pyspark
    except ImportError:
        return False
    installed = Path(pyspark.__file__).parent
    if not (installed / "jars").is_dir():
        return False
    home.mkdir()
    for entry in installed.iterdir():
        if entry.name != "python":
            (home / entry.name).symlink_to(entry)
    return True
