"""benchmarks/spark_remote_read.py end to end on a tiny workload: ``kafkalog serve`` as a child
process, the protocol read and the log-dir read checked to give the same rows, the confluent-kafka
consumer every record, and the table has its three rows and both ratios."""

from __future__ import annotations

from benchmarks import spark_remote_read


def test_tiny_run_reads_every_record_three_ways(capsys):
    assert spark_remote_read.main(["--records", "4000", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "checked: the protocol and log-dir reads give the same rows" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and " M | " in line]
    assert [r.split(" | ")[0] for r in rows] == ["| protocol", "| log dir", "| confluent"]
    assert "protocol / log dir = " in out and "protocol / confluent = " in out
