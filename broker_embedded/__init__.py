"""The embedded broker: everything below the fetch API, in Kafka's own on-disk format.

Layering: this package never imports ``datasource``, ``spark_kafkalog`` or ``pyspark``.
"""
