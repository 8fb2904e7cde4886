"""Kafka's ``ReplicaManager`` (kafka.server) and its delayed operations: the partitions one broker
holds and the produce, fetch and list-offsets paths over them (replica_manager.py); a partition's
replicas, ISR, high watermark and leader epoch (partition.py, Kafka's ``Partition``); a follower's
fetcher threads (replica_fetcher_thread.py, Kafka's ``ReplicaFetcherThread``); the two kinds
of operation that wait in the purgatory (common/purgatory.py), a fetch waiting for ``min_bytes``
(delayed_fetch.py) and an acks=all produce waiting for the high watermark (delayed_produce.py);
and the list-offsets values (list_offsets.py; the fetch and produce values, which the facade and
the API handlers share, are in common/), without wire encoding. The network layer and API
handlers (``server/``) and the broker facade (``broker.py``) call in here; nothing here imports
them.
"""
