"""The embedded broker: everything below the fetch API, in Kafka's own on-disk format.

Layout, by Kafka's names, bottom up: ``errors.py`` (with ``error_code.py``), ``scheduler.py``,
``record/`` (record batches), ``protocol/`` (wire schemas, message codec), ``storage/`` (the
log), ``common/`` (values the layers above share), ``cleaner/`` (log compaction),
``broker_config.py``, ``replica_manager/`` (ReplicaManager, partitions, follower fetchers,
delayed operations), ``coordinator/`` (group and transaction coordinators), ``replication/``
(the controller), ``client/`` (producers, the wire client), the facade ``broker.py`` (with
``cluster.py``), ``server/`` (the wire protocol).

Layering: a module imports its own layer or a lower one, in the order declared in
tests/test_layering.py, which checks it; this package never imports ``datasource``,
``spark_kafkalog`` or ``pyspark``.
"""
