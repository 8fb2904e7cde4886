"""Kafka's coordinators (kafka.coordinator): the transaction coordinator's state
(transaction_coordinator.py: the producer id and epoch of each transactional id and the
partitions of its open transaction, in memory). The group coordinator (consumer groups and
committed offsets in ``__consumer_offsets``) comes in a later issue. Nothing here imports the
broker facade or the network layer (``server/``).
"""
