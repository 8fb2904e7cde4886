"""Values and one small mechanism that several layers above the log share, so that none of them
imports another sideways or upward to get them: a record to produce and building a batch from
such records (producer_record.py: the client's producers, the coordinators' internal-topic
writes, the facade), the fetch request and its response (fetch_request.py: the replica manager,
its partitions and follower fetchers, the facade, the Fetch API), a produce result
(produce_response.py: the replica manager, the facade, the Produce API, the embedded producer),
and the purgatory that parks an operation which cannot complete yet (purgatory.py: the replica
manager's delayed fetch and produce, the group coordinator's delayed join and heartbeat).

Named after Kafka's ``common`` packages (the clients' ``org.apache.kafka.common`` and the
``server-common`` module, where Kafka 4 moved the purgatory), which hold what the clients and the
server's components share. It sits just above ``storage/`` (its values name topic partitions,
isolation levels, segment regions and aborted transactions) and below everything that shares it;
it imports only the layers below it (the order in tests/test_layering.py).
"""
