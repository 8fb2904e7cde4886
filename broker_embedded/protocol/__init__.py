"""Kafka's wire-protocol message schemas, shared by the server (``server/``) and the wire client
(``client/kafka_client.py``): kio's generated classes by API key and version, their cached
readers and writers, and building a message of any version from keyword values. Pure functions;
imports neither the broker facade nor the network layer. Needs kio (Python 3.11+): import it
lazily from code that must run without kio.
"""
