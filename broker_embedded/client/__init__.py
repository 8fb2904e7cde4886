"""Kafka's clients (org.apache.kafka.clients): what a producer does before a request reaches the
broker. A record to produce and building one record batch v2 from such records
(producer_record.py), the default partitioner for keyed records (default_partitioner.py), and
the embedded transactional producer (transactional_producer.py, which drives a ``Broker`` or an
``EmbeddedCluster`` passed in and does the coordinator's part inline), and the blocking
wire-protocol client (kafka_client.py: ApiVersions, Metadata, Produce, Fetch, ListOffsets and the
topic admin APIs over kio's schemas, shared with the server through broker_embedded/protocol/),
which ``kafkalog topics|produce|consume --bootstrap-server`` use. Nothing here imports the broker
facade or the network layer (``server/``).
"""
