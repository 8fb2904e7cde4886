"""The long fuzz campaign of issue 11 part 3: mutated segments, index and checkpoint files and
option maps through every reader, counting inputs and reporting every defect.

    python -m benchmarks.fuzz --minutes N | --seconds N [--seed S] [--out DIR] [--rss-bound-mb M]
                              [--no-probes] [--only decoders,options,logdir,broker,wire]
    python -m benchmarks.fuzz --replay DIR/findings/<file>.json
    python -m benchmarks.fuzz --atheris {records,legacy,index,checkpoint,options} --minutes N

Targets (each input is a fresh ``random.Random(f"{seed}/{target}/{i}")``, so an input is
reproduced from the seed, the target and its index, and every finding's input is also saved):

- ``decoders``: a seed segment (every codec of v2, magic 0/1 with every codec, the fixtures' real
  segments) mutated in memory (``_fuzz_mutators``) and decoded by the columnar decoder and the
  Python decoder, which must agree or both raise domain errors naming the file; records must not
  go missing or change where the mutation cannot legitimately have removed them;
- ``options``: random option maps (``_fuzz_options``) through ``KafkaSourceOptions.parse``;
- ``logdir``: one file of a broker-written log dir mutated (segments that are or are not the
  last, indexes, checkpoints, metadata) and read by the read-only view (fetch and batches),
  ``kafkalog consume`` and ``kafkalog dump --verify`` in process (``_fuzz_logdir``);
- ``broker``: the same plus a broker opening a copy (``kafkalog topics list``; recovery when the
  clean shutdown marker is removed);
- ``wire``: a corpus request frame of every API and version the server serves, mutated (bit
  flips, sizes and lengths at boundary values, truncation, splices, random API key or version,
  huge compact varints, garbage tagged fields, pipelining) and sent in pieces or cut off to one
  in-process ``BrokerServer``, which must keep answering a probe with the exact known bytes,
  answer in order with decodable responses, log no traceback, keep its threads, descriptors and
  log dir intact (``_fuzz_wire``); a fifth of the inputs are SASL exchanges (PLAIN, SCRAM) with
  the handshake, first or final frame mutated, after which a SCRAM login must still succeed
  (``_fuzz_wire_sasl``);
- probes (``_fuzz_probes``), a few times per campaign: decompression bombs under an RSS bound,
  leader epoch 2^31-1, 2,000 partitions under ``ulimit -n 1024``, reading commands on an ordinary
  directory, colliding topic names, ``consume`` subprocesses, Spark batch reads.

Time is shared between the targets in proportion to ``SHARES``; every input runs under a time
bound (SIGALRM) and a watchdog thread ends the process (exit 3, the input saved) if one input
exceeds ten times that. RSS and open file descriptors are sampled; a campaign whose RSS passes
``--rss-bound-mb`` or whose descriptors grow is a finding. Output: per target the inputs tried
and inputs/s, then every distinct finding (kind, target, first detail, count, saved input);
exit 1 when there is any finding, 0 otherwise.

Single process, single thread (plus the watchdog); the working files live in a temporary
directory (``/dev/shm`` when present) removed at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import shutil
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from benchmarks import _fuzz_probes as probes
from benchmarks._fuzz_corpus import Seed, all_seeds
from benchmarks._fuzz_logdir import LogDirTarget, mutate_file, open_fds
from benchmarks._fuzz_mutators import Mutant, mutate
from benchmarks._fuzz_options import fuzz_one
from benchmarks._fuzz_oracle import Finding, bounded, check_decoders, check_no_loss

SHARES = {"decoders": 0.50, "options": 0.15, "logdir": 0.27, "broker": 0.08, "wire": 0.10}
INPUT_SECONDS = 20.0  # the SIGALRM bound of one input
WATCHDOG_FACTOR = 10
SOURCE = "00000000000000000000.log"


@dataclass
class Report:
    """Counts, seconds and findings of a campaign (see the module docstring)."""

    out: Path
    inputs: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)
    findings: dict[str, list] = field(default_factory=dict)  # signature -> [count, first line]
    saved: Counter = field(default_factory=Counter)

    def finding(self, target: str, f: Finding, reproducer: dict) -> None:
        signature = f"{target}:{f.kind}:{_signature(f)}"
        entry = self.findings.setdefault(signature, [0, f.detail.splitlines()[0][:300], None])
        entry[0] += 1
        if self.saved[signature] < 3:
            self.saved[signature] += 1
            (self.out / "findings").mkdir(parents=True, exist_ok=True)
            path = (
                self.out / "findings" / f"{target.replace('/', '_')}-{f.kind}-{len(self.findings)}-"
                f"{self.saved[signature]}.json"
            )
            path.write_text(
                json.dumps(
                    {"target": target, "kind": f.kind, "detail": f.detail, **reproducer}, indent=1
                )
            )
            entry[2] = entry[2] or str(path)
        if entry[0] == 1:
            print(f"FINDING [{target}] {f.kind}: {f.detail.splitlines()[0][:400]}", flush=True)

    def summary(self) -> str:
        lines = ["", "target        inputs     seconds   inputs/s"]
        for t in sorted(self.inputs):
            s = self.seconds[t]
            lines.append(
                f"{t:<12} {self.inputs[t]:>8} {s:>10.1f} {self.inputs[t] / max(s, 1e-9):>10.1f}"
            )
        lines.append(f"{'total':<12} {sum(self.inputs.values()):>8}")
        lines.append(f"\n{len(self.findings)} distinct findings")
        for sig, (count, first, saved) in sorted(self.findings.items()):
            lines.append(f"- {sig.split(':')[0]} {sig.split(':')[1]} x{count}: {first}")
            if saved:
                lines.append(f"    reproduce: python -m benchmarks.fuzz --replay {saved}")
        return "\n".join(lines)


def _signature(f: Finding) -> str:
    """What makes two findings the same defect: for a crash its exception type and the
    innermost frame of this project; else the first line without numbers and quoted text."""
    first = f.detail.splitlines()[0]
    if f.kind == "crash":
        exc = re.findall(r"\b([A-Z]\w*(?:Error|Exception|Exit))\b", first)
        frames = [
            m
            for m in re.findall(r'File "([^"]+)", line \d+, in (\w+)', f.detail)
            if "/lib/python" not in m[0] and "_fuzz_" not in m[0]
        ]
        where = f"{Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else first[:60]
        return f"{exc[-1] if exc else '?'} in {where}"
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "", first)
    return re.sub(r"\d+", "N", text)[:70]


def _mutant_json(seed: Seed, m: Mutant) -> dict:
    return {
        "seed_name": seed.name,
        "mutation": m.kind,
        "touched": list(m.touched),
        "recrc": m.recrc,
        "lossy": m.lossy,
        "input_base64": base64.b64encode(m.data).decode("ascii"),
    }


def _mutant_from(rep: dict) -> Mutant:
    return Mutant(
        base64.b64decode(rep["input_base64"]),
        rep["mutation"],
        tuple(rep["touched"]),
        rep["recrc"],
        rep["lossy"],
    )


# -- the targets: one input each -------------------------------------------------------------------


class Targets:
    """The per-input targets over shared state (seeds, the log-dir working copy, the wire
    target's server), each built when first used."""

    def __init__(self, base: Path, run_seed: int) -> None:
        self.base = base
        self.run_seed = run_seed
        self.current: dict = {}
        self.wire_started = False

    @cached_property
    def seeds(self) -> list[Seed]:
        return all_seeds()

    @cached_property
    def logdir(self) -> LogDirTarget:
        return LogDirTarget.create(self.base)

    @cached_property
    def wire(self) -> Any:
        from benchmarks._fuzz_wire import WireTarget  # kio: Python 3.11+

        self.wire_started = True
        return WireTarget.create(self.base / "wire")

    def wire_input(self, i: int, report: Report) -> None:
        rng = self.rng("wire", i)
        reproducer, found = self.wire.run(i, rng)
        self.current |= reproducer
        for f in found:
            report.finding("wire", f, self.current)

    def close_wire(self, report: Report) -> None:
        """Stop the wire target's server and report what its final checks find."""
        if self.wire_started:
            for f in self.wire.close():
                report.finding("wire/final", f, {"run_seed": self.run_seed})

    def rng(self, target: str, i: int) -> random.Random:
        self.current = {"run_seed": self.run_seed, "target": target, "index": i}
        return random.Random(f"{self.run_seed}/{target}/{i}")

    def decoders(self, i: int, report: Report) -> None:
        rng = self.rng("decoders", i)
        seed = rng.choice(self.seeds)
        m = mutate(seed, rng)
        self.current |= _mutant_json(seed, m)
        try:
            run_decoders(seed, m)
        except Finding as f:
            report.finding("decoders", f, self.current)

    def options(self, i: int, report: Report) -> None:
        rng = self.rng("options", i)
        try:
            fuzz_one(rng)
        except Finding as f:
            report.finding("options", f, self.current)

    def logdir_input(self, i: int, report: Report, *, broker: bool) -> None:
        target = "broker" if broker else "logdir"
        rng = self.rng(target, i)
        path = self.logdir.pick(rng)
        seed, m = mutate_file(self.logdir.template, path, rng)
        self.current |= {"file": str(path.relative_to(self.logdir.template.path))}
        self.current |= _mutant_json(seed, m)
        for what, f in self.logdir.run_mutant(path, seed, m, rng if broker else None):
            report.finding(f"{target}/{what}", f, self.current)


def run_decoders(seed: Seed, m: Mutant) -> None:
    rows = check_decoders(m.data, SOURCE)
    if rows is not None:
        check_no_loss(seed, m, rows, prefix_ok=False)


# -- the campaign ----------------------------------------------------------------------------------


class Watchdog(threading.Thread):
    """Ends the process when one input runs past ``limit`` seconds (SIGALRM could not stop it:
    a compiled kernel or a C library loop), saving the input first."""

    def __init__(self, targets: Targets, out: Path, limit: float) -> None:
        super().__init__(daemon=True)
        self.targets, self.out, self.limit = targets, out, limit
        self.started = time.monotonic()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            if time.monotonic() - self.started > self.limit:
                (self.out / "findings").mkdir(parents=True, exist_ok=True)
                path = self.out / "findings" / "hard-hang.json"
                path.write_text(json.dumps({"kind": "hang", **self.targets.current}, indent=1))
                print(
                    f"FINDING hang: one input ran over {self.limit:g} s; saved {path}", flush=True
                )
                os._exit(3)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def run_probes(
    targets: Targets, base: Path, report: Report, rng: random.Random, spark: bool
) -> None:
    """Each probe once (consume subprocesses a few times), bounded, counted as inputs."""
    jobs = [
        ("probe/plain_dir", lambda: probes.plain_dir(base / "p1")),
        ("probe/topic_names", lambda: probes.topic_names(base / "p2", rng)),
        ("probe/epoch", lambda: probes.epoch(targets.logdir)),
        ("probe/bomb", lambda: probes.bomb(base / "p3")),
        ("probe/open_files", lambda: probes.open_files(base / "p4")),
    ] + [("probe/consume_subprocess", lambda: probes.consume_subprocess(targets.logdir, rng))] * 8
    if spark:
        jobs.append(("probe/spark", lambda: probes.spark_reads(targets.logdir, rng)))
    for name, job in jobs:
        began = time.perf_counter()
        targets.current = {"probe": name}
        try:
            report.inputs[name] += job()
        except Finding as f:
            report.inputs[name] += 1
            report.finding(name, f, {"probe": name})
        except Exception as e:  # a probe's own setup failing is reported, not hidden
            report.inputs[name] += 1
            report.finding(name, Finding("crash", f"{type(e).__name__}: {e}"), {"probe": name})
        finally:
            for p in (base / "p1", base / "p2", base / "p3", base / "p4"):
                shutil.rmtree(p, ignore_errors=True)
        report.seconds[name] += time.perf_counter() - began


def campaign(args: argparse.Namespace) -> int:
    warnings.simplefilter("ignore")
    base = probes.temp_base()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    run_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    print(f"fuzz campaign: seed {run_seed}, {seconds:g} s, findings in {out}", flush=True)
    try:
        targets = Targets(base, run_seed)
        if not args.no_probes:
            run_probes(targets, base, report, random.Random(run_seed), args.spark)
        deadline = time.monotonic() + seconds  # the probes are not counted
        fds0, rss0 = open_fds(), rss_mb()
        try:
            run_inputs(targets, report, deadline, [t for t in args.only.split(",") if t])
        finally:
            targets.close_wire(report)
        fds1, rss1 = open_fds(), rss_mb()
        if fds1 > fds0 + 20:
            report.finding(
                "campaign",
                Finding("fds", f"open descriptors grew from {fds0} to {fds1} over the campaign"),
                {},
            )
        print(
            f"\nRSS {rss0:.0f} MiB after the setup, {rss1:.0f} MiB at the end; open "
            f"descriptors {fds0} -> {fds1}"
        )
        if rss1 > args.rss_bound_mb:
            report.finding(
                "campaign",
                Finding("memory", f"RSS {rss1:.0f} MiB over the bound {args.rss_bound_mb} MiB"),
                {},
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(report.summary(), flush=True)
    return 1 if report.findings else 0


def run_inputs(targets: Targets, report: Report, deadline: float, only: list[str]) -> None:
    shares = {t: s for t, s in SHARES.items() if not only or t in only}
    steps = {
        "decoders": targets.decoders,
        "options": targets.options,
        "logdir": lambda i, r: targets.logdir_input(i, r, broker=False),
        "broker": lambda i, r: targets.logdir_input(i, r, broker=True),
        "wire": targets.wire_input,
    }
    watchdog = Watchdog(targets, report.out, INPUT_SECONDS * WATCHDOG_FACTOR)
    watchdog.start()
    batch = {"decoders": 200, "options": 200, "logdir": 5, "broker": 1, "wire": 20}
    next_report = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            target = min(shares, key=lambda t: report.seconds[t] / shares[t])
            began = time.perf_counter()
            for _ in range(batch[target]):
                i = report.inputs[target]
                watchdog.started = time.monotonic()
                try:
                    with bounded(INPUT_SECONDS):
                        steps[target](i, report)
                except Finding as f:  # a hang
                    report.finding(target, f, targets.current)
                report.inputs[target] += 1
            report.seconds[target] += time.perf_counter() - began
            if time.monotonic() > next_report:
                next_report += 60
                print(
                    f"  {dict(report.inputs)} inputs, {len(report.findings)} distinct "
                    f"findings, RSS {rss_mb():.0f} MiB",
                    flush=True,
                )
    finally:
        watchdog.stopped.set()


# -- replay and atheris ----------------------------------------------------------------------------


def replay(path: Path) -> int:
    """Run one saved input again; print what happens now (exit 1 if still a finding)."""
    warnings.simplefilter("ignore")
    rep = json.loads(path.read_text())
    target = rep.get("target", "")
    print(f"replaying {path}: {target} {rep.get('kind')}\n  was: {rep.get('detail', '')[:500]}")
    try:
        if target == "decoders":
            seed = next(s for s in all_seeds() if s.name == rep["seed_name"])
            run_decoders(seed, _mutant_from(rep))
        elif target == "options":
            fuzz_one(random.Random(f"{rep['run_seed']}/options/{rep['index']}"))
        elif target.startswith(("logdir", "broker")):
            return _replay_logdir(rep)
        elif target.startswith("wire"):
            from benchmarks._fuzz_wire import replay_wire

            return replay_wire(rep, probes.temp_base())
        else:
            print("the probes are deterministic: python -m benchmarks.fuzz --minutes 0 runs them")
            return 2
    except Finding as f:
        print(f"  now: {f.kind}: {f.detail[:2000]}")
        return 1
    print("  now: no finding")
    return 0


def _replay_logdir(rep: dict) -> int:
    from benchmarks._fuzz_corpus import make_seed

    base = probes.temp_base()
    try:
        target = LogDirTarget.create(base)
        path = target.template.path / rep["file"]
        seed = (
            make_seed(rep["file"], path.read_bytes())
            if path.suffix == ".log"
            else Seed(rep["file"], path.read_bytes(), (), ())
        )
        rng = random.Random(0) if rep["target"].startswith("broker") else None
        found = target.run_mutant(path, seed, _mutant_from(rep), rng)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for what, f in found:
        print(f"  now [{what}]: {f.kind}: {f.detail[:1500]}")
    if not found:
        print("  now: no finding")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, help="the length (instead of --minutes)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", default="fuzz-out", help="where findings are saved")
    parser.add_argument("--rss-bound-mb", type=int, default=2048)
    parser.add_argument("--no-probes", action="store_true", help="skip the probes")
    parser.add_argument("--spark", action="store_true", help="also the Spark read probe")
    parser.add_argument("--only", default="", help="comma-separated targets")
    parser.add_argument("--replay", type=Path, help="run one saved finding again")
    parser.add_argument(
        "--atheris", choices=("records", "legacy", "index", "checkpoint", "options")
    )
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.atheris:
        from benchmarks._fuzz_atheris import run

        return run(args.atheris, args.minutes, args.out)
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
