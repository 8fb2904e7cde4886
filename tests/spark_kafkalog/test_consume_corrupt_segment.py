"""``kafkalog consume`` stops with an error at a batch whose length is impossible in a segment
that is not the last one (issue 11, defect 1: it used to skip the rest of that segment and exit
0)."""

from __future__ import annotations

from pathlib import Path

from tests.broker_embedded.storage.test_corrupt_batch_length import corrupt, write_log
from tests.spark_kafkalog.test_cli import kafkalog


def test_consume_exits_non_zero_naming_file_position_and_offset(tmp_path: Path) -> None:
    path, position, offset = corrupt(write_log(tmp_path / "d"), 1, 2)
    # read_committed walks the batch headers up to the high watermark for the LSO first
    for isolation, printed in (("read_uncommitted", offset), ("read_committed", 0)):
        done = kafkalog(
            "consume",
            "--log-dir",
            tmp_path / "d",
            "--topic",
            "orders",
            "--isolation-level",
            isolation,
        )
        assert done.returncode == 1
        assert done.stdout.split() == [f"v{o}" for o in range(printed)]  # nothing past it
        assert done.stderr == (
            f"kafkalog consume: corrupt record data in {path} at byte {position} (batch base "
            f"offset {offset}): the batch at offset {offset} (its header says base offset "
            f"{offset}, length 2147483647) does not fit the {path.stat().st_size - position} "
            "bytes left in a segment that is not the last one: corrupt, not a torn tail\n"
        )
