"""Kafka's clients (org.apache.kafka.clients): what a producer does before a request reaches the
broker. A record to produce and building one record batch v2 from such records
(producer_record.py), the default partitioner for keyed records (default_partitioner.py), and
the embedded transactional producer (transactional_producer.py, which drives a ``Broker`` or an
``EmbeddedCluster`` passed in and does the coordinator's part inline). The wire-protocol client
the data source will use for ``kafka.bootstrap.servers`` is to come here too. Nothing here
imports the broker facade or the network layer (``server/``).
"""
