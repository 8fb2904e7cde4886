"""The controller (controller.py): the cluster's topics and partitions, leader election, ISR
changes (AlterPartition), the transaction coordinator it owns, and rack-aware replica assignment
(replica_assignment.py). It drives the brokers' replica managers and log managers, and creates
the coordinators' internal topics, so it sits above ``replica_manager/`` and ``coordinator/``
and below the facade (``broker.py``, ``cluster.py``), which it knows only as a
:class:`~broker_embedded.replication.registered_broker.RegisteredBroker` (tests/test_layering.py).
A partition's replica state, ISR, high watermark and leader epochs live with the replica manager
(replica_manager/partition.py), which the controller's decisions reach.
"""
