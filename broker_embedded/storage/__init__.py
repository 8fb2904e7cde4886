"""Kafka's log directory: segment files, offset and time indexes, checkpoint files, partition
directories and the segment writer."""
