"""The environment the suite's JVMs and Spark's Python workers start in: set once by the test
run's first process (tests/conftest.py's ``pytest_configure``), inherited by pytest-xdist's
workers and by every process a test starts (Spark sessions and children, Kafka 3.9 brokers and
tools). It changes how fast processes start, never what they do:

- ``JDK_JAVA_OPTIONS=-XX:TieredStopAtLevel=1``: every JVM runs the JIT's first tier only. The
  suite's JVMs live seconds to minutes on small inputs, and the second tier compiled the same
  code again at a core's cost (a Kafka 3.9 broker's start and two of its tools: 7.1 CPU-seconds
  with both tiers, 4.6 with the first). A ``JDK_JAVA_OPTIONS`` already set is kept.
- ``SPARK_HOME``: a folder of links to the installed PySpark's folders (``bin``, ``jars``, ...)
  without ``python/``. A pip-installed PySpark's JVM puts ``python/lib/pyspark.zip`` and
  py4j's zip first on its Python workers' ``PYTHONPATH``, and Python compiles modules imported
  from a zip at every import (it keeps no bytecode for them): each of Spark's Python worker
  processes spent about 0.4 s of a core compiling PySpark, and the suite starts hundreds. With
  the zips absent the workers import the same PySpark from site-packages, with its bytecode. A
  ``SPARK_HOME`` already set (a Spark install of the user's) is kept.

The links' folder is made fresh for the run and removed at its end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

JIT_FIRST_TIER = "-XX:TieredStopAtLevel=1"
# the folder this process made, if it did (its xdist workers and children inherit it)
_made: list[Path] = []


def set_up() -> None:
    """Set the environment of the module docstring, unless the user set it."""
    os.environ.setdefault("JDK_JAVA_OPTIONS", JIT_FIRST_TIER)
    if "SPARK_HOME" not in os.environ:
        home = spark_home_without_zips()
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
            _made.append(home)


def tear_down() -> None:
    """Remove the folder :func:`set_up` made, in the process that made it (not in the
    pytest-xdist workers or the pytest children that inherited it)."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def spark_home_without_zips() -> Path | None:
    """A fresh folder linking every entry of the installed PySpark but ``python/``; None
    without PySpark."""
    try:
        import pyspark
    except ImportError:
        return None
    installed = Path(pyspark.__file__).parent
    if not (installed / "jars").is_dir():
        return None
    home = Path(tempfile.mkdtemp(prefix="kafkalog-spark-home-"))
    for entry in installed.iterdir():
        if entry.name != "python":
            (home / entry.name).symlink_to(entry)
    return home
