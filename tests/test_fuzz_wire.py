"""The CI share of the wire fuzz target (``benchmarks/fuzz.py --only wire``): its corpus is
valid (every frame of every served API and version is answered with a response that decodes),
a few seconds of mutated frames leave the server answering with no finding, and a saved input
replays."""

from __future__ import annotations

import base64
import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("kio", reason="kio (the server's protocol schemas) needs Python 3.11+")

from benchmarks._fuzz_wire import (  # noqa: E402
    Conn,
    Plan,
    WireTarget,
    decode_response,
    expects_response,
)
from benchmarks._fuzz_wire_frames import mutate_frame  # noqa: E402
from benchmarks.fuzz import main, replay  # noqa: E402

COORDINATOR_NOT_AVAILABLE = 15
SERVED = {0, 1, 2, 3, 8, 9, 10, 18, 19, 20, 21, 22, 32, 37, 60}


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    target = WireTarget.create(tmp_path_factory.mktemp("wire"))
    yield target
    assert target.close() == []


def answer_code(wire: WireTarget, frame) -> int | None:
    """The top-level error code of the answer to ``frame`` (0 when the body has none); None
    for a request without a response."""
    conn = Conn(wire.server.port, 5.0)
    try:
        conn.sock.sendall(frame.data)
        if not expects_response(frame.data[4:]):
            return None
        body = decode_response(frame.data[4:], conn.recv_frame())
        return int(getattr(body, "error_code", 0))
    finally:
        conn.close()


def wait_for_coordinators(wire: WireTarget, timeout_s: float = 60.0) -> None:
    """FindCoordinator and a transactional InitProducerId answer COORDINATOR_NOT_AVAILABLE
    while the internal topics are being created (as Kafka's do): wait, bounded, until each of
    their frames is answered otherwise."""
    deadline = time.monotonic() + timeout_s
    for frame in (f for f in wire.corpus if f.api_key in (10, 22)):
        while answer_code(wire, frame) == COORDINATOR_NOT_AVAILABLE:
            assert time.monotonic() < deadline, f"{frame.name}: no coordinator in {timeout_s} s"
            time.sleep(0.1)


def test_every_corpus_frame_is_answered(wire: WireTarget) -> None:
    assert {f.api_key for f in wire.corpus} == SERVED
    assert len(wire.corpus) == 357  # every variant of every served version
    wait_for_coordinators(wire)
    codes = Counter(answer_code(wire, frame) for frame in wire.corpus)
    del codes[None]
    # top-level error codes: 0, and FETCH_SESSION_ID_NOT_FOUND (70) for the incremental
    # fetches after their session was closed
    assert codes == {0: 335, 70: 11}, codes
    assert [r.getMessage() for r in wire.server.capture.drain()] == []


def test_mutated_frames_leave_the_server_answering(wire: WireTarget) -> None:
    for i in range(150):
        reproducer, found = wire.run(i, random.Random(f"ci/wire/{i}"))
        assert found == [], (reproducer, [f.detail for f in found])


def test_mutated_sasl_frames_leave_the_server_serving(wire: WireTarget) -> None:
    """PLAIN and SCRAM exchanges, each with its handshake, first or final frame mutated: no
    finding (no traceback, the SASL login and the plaintext probe still answered)."""
    steps = Counter()
    for i in range(120):
        reproducer, found = wire.run_sasl(i, random.Random(f"ci/sasl/{i}"))
        assert found == [], (reproducer, [f.detail for f in found])
        steps[reproducer["sasl"]["mechanism"], reproducer["sasl"]["step"]] += 1
    assert set(steps) == {("PLAIN", 0), ("PLAIN", 1)} | {
        (m, s) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512") for s in (0, 1, 2)
    }


def test_a_saved_input_replays(wire: WireTarget, tmp_path: Path) -> None:
    frame = next(f for f in wire.corpus if f.name == "MetadataRequestv9/named")
    data, kind = mutate_frame(frame, frame, random.Random(3))
    saved = tmp_path / "wire-input.json"
    plan = Plan("chunks", (1, 2, 3)).__dict__
    encoded = base64.b64encode(data).decode("ascii")
    rep = {"target": "wire", "kind": "probe", "mutation": kind, "plan": plan}
    saved.write_text(json.dumps(rep | {"detail": "-", "input_base64": encoded}))
    assert replay(saved) == 0


def test_a_saved_sasl_input_replays(wire: WireTarget, tmp_path: Path) -> None:
    reproducer, found = wire.run_sasl(7, random.Random("replay"))
    assert found == []
    saved = tmp_path / "sasl-input.json"
    saved.write_text(json.dumps({"target": "wire", "kind": "probe", "detail": "-"} | reproducer))
    assert replay(saved) == 0


def test_a_short_wire_campaign(tmp_path: Path, capsys) -> None:
    args = ["--only", "wire", "--no-probes", "--seconds", "4", "--seed", "5"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("wire "))
    assert int(line.split()[1]) > 20, out
    assert "0 distinct findings" in out
