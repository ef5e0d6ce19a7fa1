"""Re-run the FAULTS.md probes that matter against the installed bakeoff and count the defects by kind.

    .venv/bin/python benchmarks/fault_probes.py [--only SUBSTRING]

Every probe runs the real command line (``bakeoff run|report|compare``) as a subprocess against the sim
engine or the hostile server of the tests (tests/fixtures/hostile_server.py, 127.0.0.1 only), then checks
what FAULTS.md counted: a traceback, a hang (60 s), a lost or duplicated sample, a process left running,
a secret written to disk, and exit code 0 for a run that measured nothing valid. Prints one line per
defective probe and the table of counts; exits 1 when any probe is defective.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from hostile_server import CHAT_MODES, HostileServer  # noqa: E402

BAKEOFF = [sys.executable, "-m", "bakeoff"]
TAG = f"BAKEOFF_PROBE={os.getpid()}"
SECRET = "sk-PROBE-SECRET-4242"
PASSWORD = "hunter2-PASSWORD"
KINDS = ("traceback", "hang", "lost/dup", "processes", "secret", "exit 0, nothing valid")


@dataclass
class Outcome:
    rc: int | None
    output: str
    out_dir: Path
    defects: list[str] = field(default_factory=list)


def bakeoff(args: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 60) -> tuple[int | None, str]:
    full_env = {**os.environ, "COLUMNS": "200", "BAKEOFF_PROBE": str(os.getpid()), **(env or {})}
    try:
        done = subprocess.run([*BAKEOFF, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else str(exc.stdout)
    return done.returncode, done.stdout + done.stderr


def tagged_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if TAG.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    stat = (entry / "stat").read_text()
                    if stat[stat.rfind(")") + 2] not in "ZX":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def samples_of(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in out.rglob("samples.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def valid(rows: list[dict[str, object]]) -> bool:
    return any(r.get("status") == "ok" and (r.get("decode_tps") or 0) > 0 for r in rows)  # type: ignore[operator]


def judge(o: Outcome, *, is_run: bool = True, secret: str | None = None) -> Outcome:
    if o.rc is None:
        o.defects.append("hang")
    if "Traceback (most recent call last)" in o.output:
        o.defects.append("traceback")
    rows = samples_of(o.out_dir)
    per_point = Counter((r.get("run_id"), r.get("arm"), r.get("prompt"), r.get("mode"), r.get("rep"),
                         r.get("pass_index"), r.get("depth"), r.get("concurrency")) for r in rows)
    if any(n > int(key[-1] or 1) for key, n in per_point.items()):  # a concurrency point holds one per stream
        o.defects.append("lost/dup")
    if is_run and o.rc == 0 and not valid(rows):
        o.defects.append("exit 0, nothing valid")
    if secret:  # in what bakeoff wrote (the run directories), not in the bakeoff file the probe wrote
        for path in (o.out_dir / "runs").rglob("*"):
            if path.is_file() and secret.encode() in path.read_bytes():
                o.defects.append("secret")
                break
    deadline = time.monotonic() + 5
    while tagged_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = tagged_processes()
    if left:
        o.defects.append("processes")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return o


def attach_file(tmp: Path, url: str, engine: str = "openai", extra: str = "") -> Path:
    path = tmp / "b.yaml"
    path.write_text(f"arms:\n  - {{name: fake, engine: {engine}, url: '{url}'{extra}}}\n"
                    "workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 0, request_timeout_s: 5}\n")
    return path


def run_probe(tmp: Path, args: list[str], *, secret: str | None = None) -> Outcome:
    rc, out = bakeoff(args, tmp)
    return judge(Outcome(rc, out, tmp), secret=secret)


def run_file(tmp: Path, path: Path, *options: str, out: str = "runs", secret: str | None = None) -> Outcome:
    """``bakeoff run PATH --out OUT OPTIONS...`` in ``tmp``, judged."""
    return run_probe(tmp, ["run", str(path), "--out", out, *options], secret=secret)


SIM = "{name: %s, engine: sim, model: x, options: {itl_ms: 2%s}}"
WORK = "workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 1}\n"


def sim_file(tmp: Path, *arms: str, head: str = "", work: str = WORK) -> Path:
    path = tmp / "b.yaml"
    path.write_text(head + "arms:\n" + "".join(f"  - {a}\n" for a in arms) + work)
    return path


def sim_arm(name: str, options: str = "") -> str:
    return SIM % (name, options)


Probe = Callable[[Path], Outcome]


def attach_probe(url: str, engine: str = "openai") -> Probe:
    return lambda t: run_file(t, attach_file(t, url, engine))


def sim_probe(*arms: str, head: str = "", work: str = WORK, out: str = "runs") -> Probe:
    return lambda t: run_file(t, sim_file(t, *arms, head=head, work=work), out=out)


def _latin1(t: Path) -> Outcome:
    t.joinpath("b.yaml").write_bytes(b"name: caf\xe9\narms: [{name: a, engine: sim, model: x}]\n")
    return run_file(t, Path("b.yaml"))


def _out_is_a_file(t: Path) -> Outcome:
    t.joinpath("outfile").write_text("x")
    return run_file(t, sim_file(t, sim_arm("a")), out="outfile")


def probes(srv: HostileServer) -> dict[str, Probe]:
    p: dict[str, Probe] = {}
    skip_modes = {"silent", "slowloris", "slowloris_nl", "slow_complete"}  # below, with a short deadline
    for mode in [*sorted(CHAT_MODES), *sorted(skip_modes)]:
        p[f"engine/openai/{mode}"] = attach_probe(srv.url(mode))
    for mode in ("models0", "models_many", "models_html", "models_slowloris", "unauthorized", "forbidden", "notfound"):
        p[f"endpoint/openai/{mode}"] = attach_probe(srv.url(mode))
    for engine, mode in (("llamacpp", "props_list"), ("llamacpp", "slots_garbage"), ("llamacpp", "timings_str"),
                         ("llamacpp", "ok"), ("vllm", "vllm_pos_garbage"), ("vllm", "metrics_garbage"), ("vllm", "ok"),
                         ("llamacpp", "models_slowloris")):
        p[f"endpoint/{engine}/{mode}"] = attach_probe(srv.url(mode), engine)
    p["attach/dead-port"] = attach_probe("http://127.0.0.1:1")
    p["secret/echo_key"] = lambda t: judge(Outcome(*bakeoff(
        ["run", str(attach_file(t, srv.url("echo_key"), extra=", api_key_env: PROBE_KEY")), "--out", "runs"], t,
        {"PROBE_KEY": SECRET}), t), secret=SECRET)
    userinfo_url = srv.url("ok").replace("http://", f"http://admin:{PASSWORD}@")
    p["secret/url-userinfo"] = lambda t: run_file(t, attach_file(t, userinfo_url), secret=PASSWORD)
    secret_env_arm = f"{{name: a, engine: sim, model: x, env: {{HF_TOKEN: {SECRET}}}, options: {{itl_ms: 2}}}}"
    p["secret/env-value"] = lambda t: run_file(t, sim_file(t, secret_env_arm), secret=SECRET)
    # config files
    p["config/latin1"] = _latin1
    p["config/bad-url"] = attach_probe("http://[::1")
    p["config/duplicate-key"] = sim_probe(sim_arm("a"), work=WORK + WORK)
    p["config/prompts-empty"] = sim_probe(sim_arm("a"), work="workload: {prompts: []}\n")
    p["config/prompts-twice"] = sim_probe(sim_arm("a"), work="workload: {prompts: [prose, prose], reps: 1}\n")
    p["config/modes-empty"] = sim_probe(sim_arm("a"), work="workload: {modes: []}\n")
    p["config/suite-empty"] = sim_probe(sim_arm("a"), work="workload: {suite: []}\n")
    bomb = "".join(f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9))
    p["config/alias-bomb"] = sim_probe("name: a\n    engine: sim\n    model: x\n    options:\n"
                                       "      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + bomb
                                       + "    sweep: {settings.threads: [1, 2]}")
    p["config/arm-name-300"] = sim_probe(sim_arm("a" * 300))
    p["config/name-off"] = sim_probe(sim_arm("off"))
    p["config/run-name-tex"] = sim_probe(sim_arm("a"), head="name: 'run $^$'\n")
    p["config/out-is-a-file"] = _out_is_a_file
    p["config/max-tokens-2^70"] = sim_probe(sim_arm("a"), work="workload: {max_tokens: 1180591620717411303424}\n")
    # engines that fail (sim)
    p["sim/crash-on-start-all"] = sim_probe(sim_arm("a", ", crash_on_start: 'E boom'"),
                                            sim_arm("b", ", crash_on_start: 'E boom'"))
    p["sim/http-fault"] = sim_probe(sim_arm("a", ", fault: http"))
    p["sim/bogus-flag"] = sim_probe("{name: a, engine: sim, model: x, extra_args: [--bogus]}")
    json_null_arm = f"{{name: bad, engine: openai, url: '{srv.url('json_null')}'}}"
    p["sim/mixed-good-bad"] = sim_probe(sim_arm("a"), json_null_arm, sim_arm("c"))
    p["sim/concurrency-json_null"] = sim_probe(
        json_null_arm.replace("name: bad", "name: fake"),
        work="workload: {prompts: [prose], max_tokens: 16, reps: 1, warmup: 0, concurrency: [3]}\n")
    p["cli/until-ci-all-error"] = lambda t: run_file(t, attach_file(t, srv.url("http500")), "--until-ci", "5%",
                                                     "--max-passes", "3")
    # signals and the run directory
    for sig in (signal.SIGHUP, signal.SIGKILL, signal.SIGUSR1, signal.SIGTERM):
        p[f"signal/{sig.name}-then-resume"] = functools.partial(signal_probe, sig=sig)
    for name, how in (("store/renamed-dir-resume", "rename"), ("store/truncated-run.json", "truncate"),
                      ("store/non-utf8-line", "badbyte"), ("store/unknown-field", "unknown"),
                      ("cli/n-boot-huge", "nboot")):
        p[name] = functools.partial(store_probe, what=how)
    return p


def finished_run(t: Path) -> Path:
    rc, out = bakeoff(["run", str(sim_file(t, SIM % ("a", ""), SIM % ("b", ""))), "--out", "runs"], t)
    assert rc == 0, out
    return next((t / "runs").iterdir())


def signal_probe(t: Path, sig: signal.Signals) -> Outcome:
    slow = SIM.replace("itl_ms: 2", "itl_ms: 15")
    cfg = sim_file(t, slow % ("a", ""), slow % ("b", ""),
                   work="workload: {prompts: [prose], max_tokens: 16, reps: 5, warmup: 1}\n")
    proc = subprocess.Popen([*BAKEOFF, "run", str(cfg), "--out", "runs"], cwd=t, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "BAKEOFF_PROBE": str(os.getpid())})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(samples_of(t / "runs") if (t / "runs").exists() else []) < 2:
        time.sleep(0.05)
    proc.send_signal(sig)
    output = proc.communicate(timeout=60)[0]
    o = judge(Outcome(0 if sig != signal.SIGKILL else 1, output, t), is_run=False)  # the signal's rc is expected
    run = next((t / "runs").iterdir())
    rc, out = bakeoff(["run", "--resume", str(run)], t)
    o2 = judge(Outcome(rc, out, t))
    rows = samples_of(t / "runs")
    if sorted((r["arm"], r["rep"]) for r in rows) != sorted((a, r) for a in "ab" for r in range(5)):
        o2.defects.append("lost/dup")
    o.defects += o2.defects
    return o


def store_probe(t: Path, what: str) -> Outcome:
    run = finished_run(t)
    jsonl = run / "samples.jsonl"
    if what == "rename":
        moved = run.parent / "renamed"
        run.rename(moved)
        rc, out = bakeoff(["run", "--resume", str(moved)], t)
        o = judge(Outcome(rc, out, t))
        if len(samples_of(t / "runs")) != 4:  # 2 arms x 2 reps, each once, whatever the directory is called
            o.defects.append("lost/dup")
        return o
    if what == "truncate":
        (run / "run.json").write_bytes((run / "run.json").read_bytes()[:500])
    elif what == "badbyte":
        lines = jsonl.read_bytes().splitlines(keepends=True)
        jsonl.write_bytes(b"".join(lines[:3]) + b"\xff\xfe garbage\n" + b"".join(lines[3:]))
    elif what == "unknown":
        jsonl.write_text("".join(json.dumps({**json.loads(line), "energy_joules": 1.0}) + "\n"
                                 for line in jsonl.read_text().splitlines()))
    args = ["report", str(run)] + (["--n-boot", "1000000000000"] if what == "nboot" else [])
    rc, out = bakeoff(args, t)
    o = judge(Outcome(rc, out, t), is_run=False)
    if what in ("truncate", "badbyte", "unknown"):
        rc2, out2 = bakeoff(["run", "--resume", str(run)], t)
        o.defects += judge(Outcome(rc2, out2, t), is_run=False).defects
    return o


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.environ["BAKEOFF_PROBE"] = str(os.getpid())
    counts = {k: 0 for k in KINDS}
    total = defective = 0
    with HostileServer() as srv, tempfile.TemporaryDirectory(prefix="bakeoff-probes-") as tmp:
        for name, probe in probes(srv).items():
            if args.only not in name:
                continue
            total += 1
            work = Path(tmp) / name.replace("/", "_")
            work.mkdir()
            try:
                o = probe(work)
            except Exception as exc:
                print(f"PROBE ERROR {name}: {type(exc).__name__}: {exc}")
                continue
            kinds = sorted(set(o.defects))
            for k in kinds:
                counts[k] += 1
            defective += bool(kinds)
            if kinds:
                last_line = o.output.strip().splitlines()[-1][:160] if o.output.strip() else ""
                print(f"DEFECT {name}: rc={o.rc} {', '.join(kinds)}; {last_line}")
    print(f"\n{total} probes, {defective} defective")
    print("| " + " | ".join(KINDS) + " |")
    print("|" + "---:|" * len(KINDS))
    print("| " + " | ".join(str(counts[k]) for k in KINDS) + " |")
    return 1 if defective else 0


if __name__ == "__main__":
    sys.exit(main())
