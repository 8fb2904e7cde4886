"""What users import and run: ``register(spark)``, the ``kafkalog`` command line, config loading
and the compaction job's logic."""
