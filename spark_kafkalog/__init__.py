"""What users import and run: ``register(spark)``, the ``kafkalog`` command line, config loading
and the compaction job's logic."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``kafkalog`` data source with ``spark`` (``spark.read.format("kafkalog")``).

    Not needed after ``pip install``, which lets Spark find it by name (``pyspark_kafkalog``);
    useful where that discovery does not run (e.g. the package is on ``sys.path`` only)."""
    from datasource.kafkalog_data_source import KafkaLogDataSource

    spark.dataSource.register(KafkaLogDataSource)
