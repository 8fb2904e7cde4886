"""Kafka's record format: varints, CRC32C, compression, record batch v2 views and builder,
legacy message sets (magic 0 and 1), control records, and the columnar (Arrow) decoder."""
