"""Kafka's ``ReplicaManager`` (kafka.server) and its delayed operations: the partitions one broker
holds and the produce, fetch and list-offsets paths over them (replica_manager.py); the
purgatory that parks a request which cannot be answered yet (purgatory.py) and the two kinds
that wait there, a fetch waiting for ``min_bytes`` (delayed_fetch.py) and an acks=all produce
waiting for the high watermark (delayed_produce.py); and the values the replica manager takes
and returns (fetch_request.py, produce_response.py, list_offsets.py), without wire encoding.
The network layer and API handlers (``server/``) and the broker facade (``broker.py``) call in
here; nothing here imports them.
"""
