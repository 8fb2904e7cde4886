"""The embedded broker: everything below the fetch API, in Kafka's own on-disk format.

Layout, by Kafka's names: ``record/`` (record batches), ``storage/`` (the log), ``replication/``
(partitions, follower fetchers, controller), ``replica_manager/`` (ReplicaManager, the purgatory
and its delayed operations), ``coordinator/`` (the transaction coordinator), ``client/`` (what
a producer does), ``cleaner/`` (log compaction), ``server/`` (the wire protocol); the facade
``broker.py`` (with ``cluster.py``) on top, and ``broker_config.py``, ``scheduler.py`` and
``errors.py``, which every package shares.

Layering: this package never imports ``datasource``, ``spark_kafkalog`` or ``pyspark``; the
packages below the facade never import ``broker.py``, ``cluster.py`` or ``server/``
(tests/test_layering.py).
"""
