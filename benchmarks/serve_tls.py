"""``kafkalog serve`` throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), one run.

    .venv/bin/python benchmarks/serve_tls.py [--records N] [--value-bytes V]

One ``kafkalog serve`` child process on 127.0.0.1 with the three listeners (certificates made
for the run with ``cryptography``, a SCRAM user added with ``kafkalog users add``), default
broker config otherwise. On each listener confluent-kafka (librdkafka) produces N records
(default 500,000) of V-byte values (default 100), acks=1, ``linger.ms`` 5, ``batch.size``
1,000,000, into a topic of its own, then a consumer assigned offset 0 reads them back (checked:
count and last offset); each figure is the best of R runs (default 2). Prints records/s and
MB/s of values per listener and the ratio to PLAINTEXT: TLS costs the encryption on both
sides and, for Fetch, the copy that replaces ``sendfile`` (segment bytes are read with
``pread`` and encrypted through ``ssl``).
Everything lives in a temporary directory; the server is stopped with SIGTERM (then killed).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from tests.broker_embedded.server._pki import make_pki  # noqa: E402

LISTENING = re.compile(r"broker 0 listening on (\w+)://127\.0\.0\.1:(\d+)")
USER, PASSWORD = "bench", "bench-secret"
TIMEOUT_S = 120.0


def start_server(work: Path) -> tuple[subprocess.Popen, dict[str, int], dict[str, dict]]:
    pki = make_pki(work)
    config = work / "broker.toml"
    config.write_text(f'[security]\n"ssl.keystore.location" = "{pki.server}"\n')
    log_dir = work / "logs"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cli = [sys.executable, "-m", "spark_kafkalog.cli"]
    proc = subprocess.Popen(
        [
            *cli,
            "serve",
            "--log-dir",
            str(log_dir),
            "--broker-config",
            str(config),
            "--listeners",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    ports: dict[str, int] = {}
    assert proc.stdout is not None
    while len(ports) < 3:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("kafkalog serve ended before listening")
        m = LISTENING.search(line)
        if m:
            ports[m.group(1)] = int(m.group(2))
    subprocess.run(
        [
            *cli,
            "users",
            "add",
            "--log-dir",
            str(log_dir),
            "--user",
            USER,
            "--password",
            PASSWORD,
            "--mechanism",
            "SCRAM-SHA-512",
        ],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
    )
    tls = {"ssl.ca.location": str(pki.ca)}
    options = {
        "PLAINTEXT": {},
        "SSL": {"security.protocol": "SSL", **tls},
        "SASL_SSL": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            **tls,
        },
    }
    return proc, ports, options


def produce(conf: dict, topic: str, records: int, value: bytes) -> float:
    producer = Producer(
        {
            **conf,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": records,
            "queue.buffering.max.kbytes": 2 << 20,
        }
    )
    producer.list_topics(topic, timeout=TIMEOUT_S)  # connected (and created) first
    began = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT_S):
        raise RuntimeError(f"produce to {topic}: records undelivered")
    return time.perf_counter() - began


def consume(conf: dict, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            **conf,
            "group.id": "bench",
            "enable.auto.commit": False,
            # librdkafka's maxima (as serve.py): fetching never pauses
            "queued.min.messages": 10_000_000,
            "queued.max.messages.kbytes": 2_097_151,
        }
    )
    try:
        consumer.list_topics(topic, timeout=TIMEOUT_S)
        began = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, last, deadline = 0, -1, time.monotonic() + TIMEOUT_S
        while count < records and time.monotonic() < deadline:
            messages = consumer.consume(10_000, 1.0)
            count += len(messages)
            last = messages[-1].offset() if messages else last
        seconds = time.perf_counter() - began
    finally:
        consumer.close()
    if (count, last) != (records, records - 1):
        raise RuntimeError(f"consume {topic}: {count} records ending at {last}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2, help="best of R runs")
    args = parser.parse_args(argv)
    value = os.urandom(args.value_bytes)
    mb = args.records * args.value_bytes / 1e6
    rows = []
    with tempfile.TemporaryDirectory(prefix="serve-tls-") as tmp:
        proc, ports, options = start_server(Path(tmp))
        try:
            for name, extra in options.items():
                conf = {"bootstrap.servers": f"127.0.0.1:{ports[name]}", **extra}
                runs = []
                for run in range(args.repeat):
                    topic = f"bench-{name.lower()}-{run}"
                    runs.append(
                        (
                            produce(conf, topic, args.records, value),
                            consume(conf, topic, args.records),
                        )
                    )
                rows.append((name, min(r[0] for r in runs), min(r[1] for r in runs)))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    base = {kind: rows[0][i] for i, kind in ((1, "produce"), (2, "consume"))}
    print(f"{args.records} records of {args.value_bytes} B, load {os.getloadavg()[0]:.1f}\n")
    print(
        "| listener | produce rec/s | MB/s | vs PLAINTEXT | consume rec/s | MB/s | vs PLAINTEXT |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, produced, consumed in rows:
        print(
            f"| {name} | {args.records / produced / 1e6:.2f} M | {mb / produced:.0f} | "
            f"{base['produce'] / produced:.2f}x | {args.records / consumed / 1e6:.2f} M | "
            f"{mb / consumed:.0f} | {base['consume'] / consumed:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
