"""Kafka's coordinators (kafka.coordinator): the transaction coordinator's state
(transaction_coordinator.py: the producer id and epoch of each transactional id and the
partitions of its open transaction, in memory); the byte formats of the internal topics
(group_metadata_record.py for ``__consumer_offsets``, transaction_log_record.py for
``__transaction_state``, on message_codec.py; consumer_protocol.py for the members' bytes), which
partition holds a group or transactional id (coordinator_partition.py) and the loading of groups
and committed offsets from a log dir (group_metadata_loader.py). Nothing here imports the
broker facade or the network layer (``server/``).
"""
