"""A Spark read fails on a batch with an impossible length in a segment that is not the last one
(issue 11, defect 1: the rest of that segment used to be skipped silently)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from tests.broker_embedded.storage.test_corrupt_batch_length import LOG_END, corrupt, write_log


@pytest.mark.parametrize("committed", [False, True])
def test_spark_read_fails_naming_file_position_and_offset(
    spark, tmp_path: Path, committed: bool
) -> None:
    path, position, offset = corrupt(write_log(tmp_path / "d"), 1, 2)
    options = (
        {"subscribe": "orders", "kafka.isolation.level": "read_committed"}
        if committed
        else {"subscribe": "orders"}
    )
    df = spark.read.format("kafkalog").options(**options).load(str(tmp_path / "d"))
    message = f"corrupt record data in {path} at byte {position} (batch base offset {offset})"
    with pytest.raises(
        PySparkException, match=message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")
    ):
        df.select("offset").collect()


def test_spark_reads_every_record_of_the_same_log_uncorrupted(spark, tmp_path: Path) -> None:
    write_log(tmp_path / "d")
    df = spark.read.format("kafkalog").option("subscribe", "orders").load(str(tmp_path / "d"))
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(LOG_END))
