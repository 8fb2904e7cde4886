"""Kafka's coordinators (kafka.coordinator): the transaction coordinator's state
(transaction_coordinator.py: the producer id and epoch of each transactional id and the
partitions of its open transaction, in memory). The group coordinator of classic consumer
groups (group_coordinator.py, its state in group_metadata.py, its timers in delayed_join.py,
its persistence seam in group_store.py). Nothing here imports the
broker facade or the network layer (``server/``).
"""
