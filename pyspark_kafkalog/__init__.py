"""Spark's automatic discovery of the ``kafkalog`` data source: PySpark imports every top-level
module named ``pyspark_<name>`` and registers its ``DefaultSource``, so that
``spark.read.format("kafkalog")`` works right after ``pip install``, without ``register``."""

from datasource.kafkalog_data_source import KafkaLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
