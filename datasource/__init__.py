"""The PySpark data source "kafkalog": options, schema, offset-range planning, batch reader,
stream reader and writer. Imports ``broker_embedded``; never ``spark_kafkalog``. Not built yet."""
