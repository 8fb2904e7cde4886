"""The Kafka wire-protocol server (``kafkalog serve``). Not built yet."""
