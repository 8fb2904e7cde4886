"""Kafka's clients (org.apache.kafka.clients): what a producer does before a request reaches the
broker. The default partitioner for keyed records (default_partitioner.py), the embedded
transactional producer (transactional_producer.py, which drives a ``Broker`` or an
``EmbeddedCluster`` passed in and does the coordinator's part inline), and the blocking
wire-protocol client (kafka_client.py: ApiVersions, Metadata, Produce, Fetch, ListOffsets and the
topic admin APIs over kio's schemas, shared with the server through broker_embedded/protocol/),
which ``kafkalog topics|produce|consume --bootstrap-server`` use. A record to produce and its
batch are in common/producer_record.py (the coordinators write them too). Nothing here imports
the broker facade or the network layer (``server/``): the facade hands out the embedded
producer, so this package sits below it (tests/test_layering.py).
"""
