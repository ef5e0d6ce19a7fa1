"""FAULTS-3 bundles / merge / Python API / export: N15, N19, N20, N21, N22, N24, N25.

Each probe runs the real ``bakeoff`` command line (or the public Python API in a subprocess) on sim runs it
makes, and holds it to the contract FAULTS-3.md gives the cause.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

from fault_probes import (
    BAKEOFF,
    Outcome,
    Probe,
    bakeoff,
    finish,
    finished_run,
    judge,
    popen,
    ran,
    sim_arm,
    sim_file,
    wait_for_samples,
)
from hostile_server import HostileServer

PROVIDER_SECRETS = ("token ghp_PROBEabcdefghijklmnopqrstuvwxyz0123\n"
                    "HF_TOKEN=hf_PROBEabcdefghijklmnopqrstuvwxyz\n"
                    "aws_secret_access_key = PROBEwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY\n"
                    "curl -H 'Authorization: Bearer sk-PROBE-stray-abcdef123456' x\n"
                    "OPENAI_API_KEY=sk-PROBE-openai-abcdef123456\n"
                    "password: PROBE-hunter2-password\n")
FRAGMENTS = (b"ghp_PROBE", b"hf_PROBE", b"PROBEwJalr", b"sk-PROBE-stray", b"sk-PROBE-openai", b"PROBE-hunter2")


def _bundled(t: Path, run: Path, name: str) -> tuple[Outcome, Path]:
    target = t / name
    return ran(t, ["bundle", str(run), "-o", str(target)], is_run=False), target


def _second_run(t: Path) -> Path:
    """A finished 2-arm run beside the one finished_run makes (its own folder, so both can be bundled)."""
    rc, out = bakeoff(["run", str(sim_file(t, sim_arm("a"), sim_arm("b", ", itl_ms: 3").replace("itl_ms: 2, ", ""))),
                       "--out", "runs2"], t)
    assert rc == 0, out
    return next((t / "runs2").iterdir())


def _api(t: Path, code: str) -> Outcome:
    """``code`` in a Python of its own that imports bakeoff; judged like a command (not a run)."""
    env = {**os.environ, "BAKEOFF_PROBE": str(os.getpid())}
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=t, env=env, capture_output=True, text=True,
                              timeout=120)
        return judge(Outcome(done.returncode, done.stdout + done.stderr, t), is_run=False)
    except subprocess.TimeoutExpired:
        return judge(Outcome(None, "", t), is_run=False)


def export_help(t: Path) -> Outcome:
    o = ran(t, ["export", "--help"], is_run=False)
    return o.expect(o.rc == 0 and "'.[parquet]'" in o.output, "export --help does not show pip install -e '.[parquet]'")


def merge_partial(t: Path) -> Outcome:
    """N19: an interrupted run's bundle merged with a finished one: the report says which is partial and why,
    names its unmeasured arm, never reads 'None rep(s)', and names the baseline its rows are against."""
    work = "workload: {prompts: [prose], max_tokens: 16, reps: 8, warmup: 0, gates: []}\n"
    slow = [sim_arm(n, ", itl_ms: 20").replace("itl_ms: 2, ", "") for n in "ab"]
    proc = popen(t, ["run", str(sim_file(t, *slow, work=work)), "--out", "runs"], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    wait_for_samples(t, 2, proc)
    proc.send_signal(signal.SIGTERM)
    o = finish(proc, t, is_run=False)
    part = next((t / "runs").iterdir())
    b1 = _bundled(t, part, "p.tgz")[1]
    b2 = _bundled(t, _second_run(t), "f.tgz")[1]
    # judged on its own folder: the copies it unpacks there are the runs' samples again, by design
    o2 = judge(Outcome(*bakeoff(["merge", str(b1), str(b2), "--label", "p", "--label", "f", "--out", "merged"], t,
                                timeout=120), t / "merged"), is_run=False)
    o.defects += o2.defects
    report = (t / "merged" / "report.md").read_text() if (t / "merged" / "report.md").exists() else ""
    o.expect(o2.rc == 0, f"merge exit {o2.rc}")
    o.expect("p: INCOMPLETE RUN:" in report, "the merged report does not say bundle p's run is incomplete")
    o.expect("no sample of b@p" in report, "the merged report does not name p's unmeasured arm b")
    o.expect("None rep(s)" not in report and "None output tokens" not in report, "the design line reads None")
    return o.expect("vs baseline (a@f)" in report, "the baseline footnote names another bundle's baseline")


def merge_label_traversal(t: Path) -> Outcome:
    b1 = _bundled(t, finished_run(t), "r1.tgz")[1]
    b2 = _bundled(t, _second_run(t), "r2.tgz")[1]
    o = ran(t, ["merge", str(b1), str(b2), "--label", "../../ESCAPED", "--label", "b", "--out", "out/merged"],
            is_run=False, timeout=120)
    escaped = [p for p in (t / "ESCAPED", t / "out" / "ESCAPED") if p.exists()]
    o.expect(not escaped, f"unpacked outside --out: {escaped}")
    return o.expect(o.rc == 2 and "--label '../../ESCAPED'" in o.output, f"exit {o.rc}, expected 2 naming the label")


def read_run_of(what: str) -> Probe:
    def probe(t: Path) -> Outcome:
        target = {"missing": "no/such/run", "empty-dir": "empty", "file": "afile"}[what]
        (t / "empty").mkdir()
        (t / "afile").write_text("x")
        o = _api(t, "import bakeoff\nfrom bakeoff.core.common.errors import BakeoffError\n"
                    f"try:\n    bakeoff.read_run({target!r})\nexcept BakeoffError as e:\n    print('REFUSED', e)\n"
                    "else:\n    print('READ')\n")
        return o.expect("REFUSED" in o.output and target in o.output, f"read_run({target!r}) not refused naming it")
    return probe


def api_stopping_rule(kwargs: str, flags: list[str]) -> Probe:
    """N22: bakeoff.run refuses what the CLI refuses, in the same words, before anything runs."""
    def probe(t: Path) -> Outcome:
        path = sim_file(t, sim_arm("a"))
        o = _api(t, "import bakeoff\nfrom bakeoff.core.common.errors import BakeoffError\n"
                    f"try:\n    bakeoff.run({str(path)!r}, out='api-runs', {kwargs})\n"
                    "except BakeoffError as e:\n    print('REFUSED', e)\nelse:\n    print('RAN')\n")
        cli = ran(t, ["run", str(path), "--out", "cli-runs", *flags], is_run=False)
        o.defects += cli.defects
        said = o.output.split("REFUSED ", 1)[-1].strip() if "REFUSED" in o.output else None
        o.expect(said is not None and not (t / "api-runs").exists(), f"bakeoff.run({kwargs}) not refused")
        o.expect(cli.rc == 2 and not (t / "cli-runs").exists(), f"the CLI's {' '.join(flags)}: exit {cli.rc}")
        return o.expect(said is not None and " ".join(said.split()) in " ".join(cli.output.split()),
                        f"API and CLI refuse in other words: {said!r}")
    return probe


def secrets_masked(t: Path) -> Outcome:
    run = finished_run(t)
    (run / "arms" / "a" / "notes.log").write_text(PROVIDER_SECRETS)
    o, bundle = _bundled(t, run, "s.tgz")
    raw = gzip.decompress(bundle.read_bytes()) if bundle.exists() else b""
    left = [f.decode() for f in FRAGMENTS if f in raw]
    o.expect(o.rc == 0 and not left, f"bundle exit {o.rc}, secrets left in the bundle: {left}")
    v = ran(t, ["verify", str(bundle)], is_run=False)
    o.defects += v.defects
    return o.expect(v.rc == 0, f"verify of the masked bundle: exit {v.rc}")


def _repacked(bundle: Path, target: Path, rel: str, data: bytes) -> Path:
    """``bundle`` with run/``rel`` replaced by ``data`` and its manifest entry rewritten to match."""
    with tarfile.open(bundle, "r:gz") as src:
        members = {m.name: src.extractfile(m).read() for m in src if m.isfile()}  # type: ignore[union-attr]
    prefix = next(n for n in members if n.endswith("manifest.json"))[:-len("manifest.json")]
    manifest = json.loads(members[prefix + "manifest.json"])
    manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    members[prefix + "manifest.json"] = json.dumps(manifest).encode()
    members[f"{prefix}run/{rel}"] = data
    with tarfile.open(target, "w:gz") as dst:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            dst.addfile(info, io.BytesIO(body))
    return target


def planted_secret_refused(t: Path) -> Outcome:
    bundle = _bundled(t, finished_run(t), "s.tgz")[1]
    provider_only = "".join(PROVIDER_SECRETS.splitlines(keepends=True)[:3]).encode()  # what verify had passed
    planted = _repacked(bundle, t / "planted.tgz", "arms/a/notes.log", provider_only)
    o = ran(t, ["verify", str(planted)], is_run=False)
    o.expect(o.rc == 2, f"verify of a bundle holding provider tokens: exit {o.rc}, expected 2")
    return o.expect("a GitHub token" in o.output and "a Hugging Face token" in o.output,
                    "verify does not say which credential shapes it found")


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def gzip_bomb(t: Path) -> Outcome:
    """N25: a 1 GiB member of zeros (a few MB compressed) added to a bundle: verify under a 1.5 GB address
    space limit exits 2 naming the member, no MemoryError."""
    bundle = _bundled(t, finished_run(t), "b.tgz")[1]
    bomb = t / "bomb.tgz"
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(bomb, "w:gz", compresslevel=1) as dst:
        members = src.getmembers()
        prefix = next(m.name for m in members if m.name.endswith("manifest.json"))[:-len("manifest.json")]
        for m in members:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        info = tarfile.TarInfo(prefix + "run/zeros.bin")
        info.size = 1 << 30
        dst.addfile(info, io.BufferedReader(_Zeros(info.size)))
    command = " ".join(BAKEOFF)
    try:
        done = subprocess.run(["sh", "-c", f"ulimit -v 1500000; exec {command} verify bomb.tgz"], cwd=t,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "BAKEOFF_PROBE": str(os.getpid())})
        o = judge(Outcome(done.returncode, done.stdout + done.stderr, t), is_run=False)
    except subprocess.TimeoutExpired:
        o = judge(Outcome(None, "", t), is_run=False)
    o.expect("MemoryError" not in o.output, "MemoryError")
    return o.expect(o.rc == 2 and "zeros.bin" in o.output, f"verify exit {o.rc}, expected 2 naming run/zeros.bin")


def probes(srv: HostileServer) -> dict[str, Probe]:
    return {
        "f3/N15/export-help-shows-the-parquet-extra": export_help,
        "f3/N19/merge-of-an-interrupted-run-says-it-is-partial": merge_partial,
        "f3/N20/merge-label-traversal-refused": merge_label_traversal,
        "f3/N21/read-run-missing-path": read_run_of("missing"),
        "f3/N21/read-run-empty-dir": read_run_of("empty-dir"),
        "f3/N21/read-run-a-file": read_run_of("file"),
        "f3/N22/api-until-ci-negative": api_stopping_rule("until_ci=-1", ["--until-ci", "-1"]),
        "f3/N22/api-max-passes-zero": api_stopping_rule("until_ci=0.03, max_passes=0",
                                                        ["--until-ci", "3%", "--max-passes", "0"]),
        "f3/N24/bundle-masks-provider-tokens": secrets_masked,
        "f3/N24/verify-refuses-a-planted-provider-token": planted_secret_refused,
        "f3/N25/verify-a-1GiB-zero-member-in-bounded-memory": gzip_bomb,
    }
