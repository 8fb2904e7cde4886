"""Kafka's coordinators (kafka.coordinator): the transaction coordinator
(transaction_coordinator.py:
each transactional id's producer id, epoch, state and partitions, with its marker writer; its
persistence in ``__transaction_state`` and the loading back in transaction_state_manager.py);
the group coordinator of classic consumer groups (group_coordinator.py, its offsets in
group_offsets.py, its heartbeats and LeaveGroup in group_heartbeats.py, its state in
group_metadata.py, its timers in delayed_join.py, its persistence seam in group_store.py); the
byte formats of the internal topics (group_metadata_record.py for ``__consumer_offsets``,
transaction_log_record.py for ``__transaction_state``, on protocol/message_codec.py;
consumer_protocol.py for the members' bytes), which partition holds a group or transactional id
(coordinator_partition.py) and the loading of groups and committed offsets from a log dir
(group_metadata_loader.py). Nothing here imports the broker facade or the network layer
(``server/``).
"""
