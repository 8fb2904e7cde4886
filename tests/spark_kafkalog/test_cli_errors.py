"""Errors reaching the command line: one line on stderr naming the file, never a traceback.

Segments of a log dir without the clean-shutdown marker (so the broker recovers them) get header
fields that the CRC does not cover forged (base offset, batch length, partition leader epoch,
magic); every broker-opening command then either recovers or fails with a domain error's line.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from broker_embedded.storage.log_manager import CLEAN_SHUTDOWN_FILE

SEGMENT = "00000000000000000000.log"
# the leader epoch cache's warning about a forged epoch, as a log line (cli_logging.py)
EPOCH_WARNING = re.compile(r"\S+ WARNING broker_embedded\.storage\.leader_epoch_file_cache: ")
BATCH_SIZE = 69  # one record "x" in a batch: 61 header bytes + 8 record bytes

# (field name, byte position in the batch header, struct format, forged values)
FORGED_FIELDS = [
    ("base offset", 0, ">q", (-1, 1, 2, 1000, (1 << 63) - 1, -(1 << 63))),
    ("batch length", 8, ">i", (-1, 0, 1, 11, 48, 49, 60, 1000, (1 << 31) - 1, -(1 << 31))),
    ("partition leader epoch", 12, ">i", (-2, 1, 11, 1000, (1 << 31) - 2, -(1 << 31))),
    ("magic", 16, ">b", (-1, 0, 1, 3, 127)),
]


@pytest.fixture
def three_batches(cli, tmp_path: Path) -> Path:
    """A log dir whose topic t holds three one-record batches, offsets 0..2 (each command's
    broker is a new leader: epochs 0, 1, 2)."""
    log_dir = tmp_path / "logs"
    assert cli(f"topics create t --log-dir {log_dir}")[0] == 0
    for _ in range(3):
        assert cli(f"produce --topic t --log-dir {log_dir}", stdin=b"x\n")[0] == 0
    assert (log_dir / "t-0" / SEGMENT).stat().st_size == 3 * BATCH_SIZE
    assert (log_dir / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n1 1\n2 2\n"
    return log_dir


def forge(log_dir: Path, batch: int, position: int, fmt: str, value: int) -> Path:
    """Overwrite a header field of batch ``batch`` of t-0's first segment; drop the marker."""
    segment = log_dir / "t-0" / SEGMENT
    data = bytearray(segment.read_bytes())
    at = batch * BATCH_SIZE + position
    data[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    segment.write_bytes(bytes(data))
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return segment


@pytest.mark.parametrize("batch", [0, 2])
def test_leader_epoch_that_cannot_grow_is_one_line_naming_the_segment(
    cli, three_batches: Path, batch: int
) -> None:
    """Issue 11 defect 3: a raw ValueError traceback from the leader epoch cache."""
    segment = forge(three_batches, batch, 12, ">i", (1 << 31) - 1)
    for command in ("topics list", "produce --topic t"):
        code, out, err = cli(f"{command} --log-dir {three_batches}", stdin=b"y\n")
        assert (code, out) == (1, "")
        assert err == (
            f"kafkalog {command.split(' -')[0]}: t-0: leader epoch 2147483647 at offset {batch} "
            f"in {segment} cannot grow: the next leader epoch would exceed the int32 maximum "
            "2147483647 (the batch header is corrupt or forged)\n"
        )
    checkpoint = three_batches / "t-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n3\n0 0\n1 1\n2 2\n"


@pytest.mark.parametrize(
    ("field", "position", "fmt", "value"),
    [(f, p, fmt, v) for f, p, fmt, values in FORGED_FIELDS for v in values],
)
def test_forged_header_fields_recover_or_fail_in_one_line(
    cli, three_batches: Path, field: str, position: int, fmt: str, value: int
) -> None:
    forge(three_batches, 1, position, fmt, value)
    for command in ("topics list", "produce --topic t", "topics describe t"):
        code, out, err = cli(f"{command} --log-dir {three_batches}", stdin=b"y\n")
        name = command.split(" -")[0].removesuffix(" t")
        lines = [line for line in err.splitlines() if not EPOCH_WARNING.match(line)]
        assert "Traceback" not in err and "unexpected" not in err, (field, value, err)
        if code == 0:
            expected = {"topics list": "t\n", "produce --topic t": ""}.get(command)
            assert expected is None or out == expected, (field, value, out)
            if command.startswith("produce"):
                assert lines[0] == "Produced 1 record in 1 batch to topic 't':", lines
        else:
            assert code == 1, (field, value, code, err)
            assert len(lines) == 1 and lines[0].startswith(f"kafkalog {name}: "), lines
            assert str(three_batches) in lines[0], lines


def test_an_unexpected_error_names_the_command_and_debug_shows_it(
    cli, monkeypatch, tmp_path: Path
) -> None:
    from spark_kafkalog import dump_log

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(dump_log, "dump", broken)
    assert cli(f"dump {tmp_path}") == (
        3,
        "",
        "kafkalog dump: unexpected ZeroDivisionError: division by zero second line (a bug in "
        "kafkalog; run kafkalog --debug dump ... for the traceback)\n",
    )
    with pytest.raises(ZeroDivisionError, match="second line"):
        cli(f"--debug dump {tmp_path}")
