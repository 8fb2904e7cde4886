"""Kafka's wire-protocol message schemas, shared by the server (``server/``) and the wire client
(``client/kafka_client.py``): kio's generated classes by API key and version, their cached
readers and writers, and building a message of any version from keyword values (schemas.py,
bounds.py). Needs kio (Python 3.11+): import it lazily from code that must run without kio.

Also Kafka's message encoding of the records of its internal topics and metadata log
(message_codec.py, Kafka's ``org.apache.kafka.common.protocol`` readers and writers, without
kio): the coordinators' ``__consumer_offsets`` and ``__transaction_state`` records and the
storage's reading of ``__cluster_metadata`` share it, so it lives here, below both.

Pure functions; imports only ``errors.py`` and ``record/`` (varints), never the broker facade or
the network layer.
"""
