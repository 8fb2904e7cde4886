"""The API handlers of the request path (Kafka's ``KafkaApis`` handle* methods), one module per
API or group of APIs; each registers itself on a
:class:`~broker_embedded.server.kafka_apis.KafkaApis`."""
