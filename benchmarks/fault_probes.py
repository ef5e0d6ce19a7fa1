"""Re-run the FAULTS.md probes that matter against the installed bakeoff and count the defects by kind.

    .venv/bin/python benchmarks/fault_probes.py [--only SUBSTRING ...]

Every probe runs the real command line (``bakeoff run|report|compare``) as a subprocess against the sim
engine or the hostile server of the tests (tests/fixtures/hostile_server.py, 127.0.0.1 only), then checks
what FAULTS.md counted: a traceback, a hang (60 s), a lost or duplicated sample, a process left running,
a secret written to disk, and exit code 0 for a run that measured nothing valid. The FAULTS-2 probes
(the review FAULTS-2.md, root causes R1..R19; names ``f2/R<n>/...``) also hold each probe to its own
contract (``contract``: the exit code the README promises, a flag a wrong number must carry, report files left
whole, a bound the run must end within). No probe needs root or a real engine: the full disk of R19 is a
file-size limit (EFBIG), the launched engine of R12/R17 is the hostile server behind a shell wrapper. Prints one
line per defective probe and the table of counts; exits 1 when any probe is defective. The whole set (147
probes) took about 18 minutes on a busy 2-core machine; ``--only f2/`` runs the FAULTS-2 probes alone.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
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
KINDS = ("traceback", "hang", "lost/dup", "processes", "secret", "exit 0, nothing valid", "contract")


@dataclass
class Outcome:
    rc: int | None
    output: str
    out_dir: Path
    defects: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # what a "contract" defect broke, for the report line

    def expect(self, ok: bool, why: str) -> Outcome:
        if not ok:
            self.defects.append("contract")
            self.why.append(why)
        return self


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
    p.update(faults2_probes(srv))
    p.update(faults3_probes(srv))
    return p


def faults3_probes(srv: HostileServer) -> dict[str, Probe]:
    """The FAULTS-3 families (causes N1..N25, names ``f3/N<n>/...``): one module per family in benchmarks/faults3/,
    each with ``probes(srv) -> dict[str, Probe]`` built from this module's helpers."""
    sys.modules.setdefault("fault_probes", sys.modules[__name__])  # one copy of the helpers when run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import importlib
    import pkgutil

    import faults3

    p: dict[str, Probe] = {}
    for info in sorted(pkgutil.iter_modules(faults3.__path__), key=lambda m: m.name):
        p.update(importlib.import_module(f"faults3.{info.name}").probes(srv))
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


# -- FAULTS-2 (the review FAULTS-2.md): one or more probes per root cause R1..R19 -------------------------
BOUND_S = 40  # a fault that must end "in seconds" (a deadline of 5 s, a 10 s setup probe) and has not by then hangs
KEY = "sk-PROBE-KEY-abcdefghijklmnopqrstuvwxyz-0123456789"


def ran(t: Path, args: list[str], env: dict[str, str] | None = None, timeout: float = 60,
        is_run: bool = True, secret: str | None = None) -> Outcome:
    """``bakeoff ARGS`` in ``t``, judged."""
    rc, out = bakeoff(args, t, env, timeout)
    return judge(Outcome(rc, out, t), is_run=is_run, secret=secret)


def flags_of(t: Path) -> Counter[str]:
    return Counter(f.split(":")[0] for r in samples_of(t / "runs") for f in r.get("flags") or [])


def attach_run(t: Path, url: str, engine: str = "openai", extra: str = "", env: dict[str, str] | None = None,
               timeout: float = 60, secret: str | None = None) -> Outcome:
    return ran(t, ["run", str(attach_file(t, url, engine, extra)), "--out", "runs"], env, timeout, secret=secret)


def bounded(t: Path, url: str, engine: str, rcs: tuple[int, ...], env: dict[str, str] | None = None) -> Outcome:
    """R1/R2: a trickle or an endless stream ends within BOUND_S with an exit code of ``rcs``."""
    o = attach_run(t, url, engine, env=env, timeout=BOUND_S)
    return o.expect(o.rc is None or o.rc in rcs, f"exit {o.rc}, expected one of {rcs}")


def proxy_env(srv: HostileServer) -> dict[str, str]:
    """Send the chat request through httpx and a proxy (the server proxies to itself)."""
    base = f"http://127.0.0.1:{srv.port}"
    return {"HTTP_PROXY": base, "http_proxy": base, "NO_PROXY": "", "no_proxy": ""}


def key_probe(t: Path, url: str, fragment: str, env: dict[str, str] | None = None, key: str = KEY,
              extra: str = ", api_key_env: PROBE_KEY") -> Outcome:
    """R4-R6: the key (or password) reaches no stored file in any spelling; ``fragment`` is what is grepped."""
    path = attach_file(t, url, extra=extra)
    path.write_text(path.read_text().replace("request_timeout_s: 5}", "request_timeout_s: 5, gates: []}"))
    return ran(t, ["run", str(path), "--out", "runs"], {"PROBE_KEY": key, **(env or {})}, secret=fragment)


def wait_for_samples(t: Path, n: int, proc: subprocess.Popen[Any], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if (t / "runs").exists() and len(samples_of(t / "runs")) >= n:
            return
        time.sleep(0.05)


def popen(t: Path, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
    env = {**os.environ, "COLUMNS": "200", "BAKEOFF_PROBE": str(os.getpid()), **kw.pop("env", {})}
    return subprocess.Popen([*BAKEOFF, *args], cwd=t, env=env, **kw)


def finish(proc: subprocess.Popen[Any], t: Path, is_run: bool = True, timeout: float = 60) -> Outcome:
    try:
        out, err = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = None
    text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (out, err))
    return judge(Outcome(rc, text, t), is_run=is_run)


SLOW_SIM = "workload: {prompts: [prose], max_tokens: 16, reps: 30, warmup: 0, gates: []}\n"


def run_dir_vanishes(t: Path, how: str) -> Outcome:
    """R3: the run directory is deleted or moved mid-run: exit 5 naming it, never recreated; a moved one resumes."""
    proc = popen(t, ["run", str(sim_file(t, sim_arm("a", ", itl_ms: 10").replace("itl_ms: 2, ", ""),
                                          work=SLOW_SIM)), "--out", "runs"],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_samples(t, 3, proc)
    run = next((t / "runs").iterdir())
    if how == "delete":
        shutil.rmtree(run)
    else:
        run.rename(t / "moved")
    o = finish(proc, t, is_run=False)
    o.expect(o.rc == 5, f"exit {o.rc} after the run directory was {how}d, expected 5")
    o.expect(not run.exists(), f"{run.name} was recreated")
    if how == "move":
        o2 = ran(t, ["run", "--resume", "moved"])
        o.defects += o2.defects
        points = [(r["rep"], r["pass_index"]) for r in samples_of(t / "moved")]
        o.expect(o2.rc == 0 and len(points) == len(set(points)) == 30,
                 f"resume of the moved run: exit {o2.rc}, {len(points)} samples, {len(set(points))} unique of 30")
    return o


THREE_ARMS = (sim_arm("a1", ", itl_ms: 5").replace("itl_ms: 2, ", ""), "{name: b, engine: sim, model: x, "
              "options: {crash_on_start: boom}}", sim_arm("a2", ", itl_ms: 6").replace("itl_ms: 2, ", ""))
FOUR_REPS = "workload: {prompts: [prose], max_tokens: 16, reps: 4, warmup: 0, gates: []}\n"


def reader_goes_away(t: Path, first: str) -> Outcome:
    """R8: ``bakeoff run FILE | head -c 1`` / ``| head -n 1``: every healthy arm still measured, no exit 1."""
    arms = THREE_ARMS if first == "line" else THREE_ARMS[::2]
    proc = popen(t, ["run", str(sim_file(t, *arms, work=FOUR_REPS)), "--out", "runs"], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline() if first == "line" else proc.stdout.read(1)
    proc.stdout.close()
    o = finish(proc, t, is_run=False)
    per_arm = Counter(r["arm"] for r in samples_of(t / "runs"))
    o.expect(o.rc not in (None, 1), f"exit {o.rc} after the reader went away")
    return o.expect(per_arm["a1"] == per_arm["a2"] == 4, f"samples per healthy arm {dict(per_arm)}, 4 each expected")


def stdout_closed(t: Path) -> Outcome:
    """R8: ``bakeoff run FILE >&-``: measured, no traceback."""
    cfg = sim_file(t, sim_arm("a"), work=FOUR_REPS)
    proc = subprocess.Popen(["sh", "-c", 'exec "$@" >&-', "sh", *BAKEOFF, "run", str(cfg), "--out", "runs"],
                            cwd=t, stderr=subprocess.PIPE,
                            env={**os.environ, "BAKEOFF_PROBE": str(os.getpid())})
    o = finish(proc, t)
    return o.expect(len(samples_of(t / "runs")) == 4, f"{len(samples_of(t / 'runs'))} samples of 4 stored")


def run_until_finished(t: Path, itl_ms: float, limit_s: float) -> subprocess.Popen[Any]:
    """A 6-arm sim run, returned once its run.json has ``finished_at`` (its reports being written next), or after
    ``limit_s``: the moment the R9 probes signal."""
    arms = [sim_arm(f"a{i}", f", itl_ms: {itl_ms:g}").replace("itl_ms: 2, ", "") for i in range(6)]
    work = "workload: {prompts: [prose, code_python], max_tokens: 16, reps: 3, warmup: 0, gates: []}\n"
    proc = popen(t, ["run", str(sim_file(t, *arms, work=work)), "--out", "runs"], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list((t / "runs").glob("*/run.json")) if (t / "runs").exists() else []
        with contextlib.suppress(OSError, ValueError):
            if runs and json.loads(runs[0].read_text()).get("finished_at"):
                break
        time.sleep(0.01)
    return proc


def sigterm_in_report(t: Path) -> Outcome:
    """R9: SIGTERM once the last sample is stored (the report is being written): exit 130 (or 0 if it had ended),
    never death by the signal; ``bakeoff report`` rebuilds."""
    proc = run_until_finished(t, 0, 60)
    proc.send_signal(signal.SIGTERM)
    o = finish(proc, t, is_run=False)
    o.expect(o.rc in (0, 130), f"exit {o.rc} on SIGTERM while the report is written, expected 130")
    run = next((t / "runs").iterdir())
    o2 = ran(t, ["report", str(run)], is_run=False)
    o.defects += o2.defects
    return o.expect(o2.rc == 0, f"report rebuild exit {o2.rc}")


def config_error(t: Path, text: str) -> Outcome:
    """R10-R12: a file the schema used to accept, or that crashed at load: a config error (2), nothing launched."""
    (t / "b.yaml").write_text(text)
    o = ran(t, ["run", "b.yaml", "--out", "runs"], is_run=False)
    o.expect(o.rc == 2, f"exit {o.rc}, expected 2 (configuration error)")
    return o.expect(not (t / "runs").exists() or not any((t / "runs").iterdir()), "a run directory was made")


WRAPPER = '#!/bin/sh\n"{py}" "{srv}" "$@"\n'  # no exec: the engine is the wrapper's child (R17)


def wrapped_llama(t: Path, build_json: str | None = None) -> str:
    """A llama-server stand-in (the hostile server) behind a shell wrapper that does not exec; its arm line."""
    folder = t / "bin"
    folder.mkdir()
    wrapper = folder / "llama-server"
    wrapper.write_text(WRAPPER.format(py=sys.executable, srv=ROOT / "tests" / "fixtures" / "hostile_server.py"))
    wrapper.chmod(0o755)
    if build_json is not None:
        (folder / "BUILD.json").write_text(build_json)
    return f"{{name: l, engine: llamacpp, model: smollm2, options: {{binary: '{wrapper}'}}}}"


def build_json_not_an_object(t: Path) -> Outcome:
    """R12: options.binary in a folder whose BUILD.json is a JSON list: the arm runs (BUILD.json ignored)."""
    work = "workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 0, gates: []}\n"
    o = run_file(t, sim_file(t, wrapped_llama(t, "[1, 2, 3]"), work=work))
    return o.expect(o.rc == 0, f"exit {o.rc} with a BUILD.json list beside the binary, expected 0")


def engine_processes(t: Path) -> list[int]:
    """Processes whose command line names this probe's wrapper folder's server (the stand-in engine)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes()
                ours = TAG.encode() in (entry / "environ").read_bytes()
                if ours and b"hostile_server.py" in cmd and b"--port" in cmd:
                    found.append(int(entry.name))
    return found


def wrapper_engine_sigkill(t: Path) -> Outcome:
    """R17: SIGKILL bakeoff while its engine runs under a non-exec wrapper: the engine is gone by the end of the
    next ``bakeoff run`` at the latest."""
    running = t / "running"  # a private leftover-engine registry: never touches other runs' engines
    env = {"BAKEOFF_RUNNING_DIR": str(running)}
    work = "workload: {prompts: [prose], max_tokens: 16, reps: 40, warmup: 0, gates: []}\n"
    proc = popen(t, ["run", str(sim_file(t, wrapped_llama(t), work=work)), "--out", "runs"], env=env,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_samples(t, 2, proc)
    proc.kill()
    proc.communicate()
    time.sleep(2)
    (t / "c.yaml").write_text("arms: [{name: a, engine: sim, model: x}]\n"
                              "workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, gates: []}\n")
    rc, out = bakeoff(["run", "c.yaml", "--out", "runs2"], t, env)
    left = engine_processes(t)
    o = judge(Outcome(rc, out, t), is_run=False)
    return o.expect(not left, f"engine pids {left} outlived a SIGKILLed bakeoff and the next run")


def concurrent_resumes(t: Path) -> Outcome:
    """R18: two ``--resume`` of one interrupted run at once: one finishes, the other is refused before it
    launches (never exit 2 after measuring), no duplicate."""
    arms = [sim_arm(n, ", itl_ms: 15").replace("itl_ms: 2, ", "") for n in "ab"]
    work = "workload: {prompts: [prose], max_tokens: 16, reps: 8, warmup: 0, gates: []}\n"
    proc = popen(t, ["run", str(sim_file(t, *arms, work=work)), "--out", "runs"], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    wait_for_samples(t, 2, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    run = next((t / "runs").iterdir())
    procs = [popen(t, ["run", "--resume", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    done = [p.communicate(timeout=120) for p in procs]  # both end before anything is judged (judge kills leftovers)
    o = judge(Outcome(procs[0].returncode, "".join(done[0] + done[1]), t), is_run=False)
    rcs = sorted(p.returncode for p in procs)
    points = [(r["arm"], r["rep"]) for r in samples_of(t / "runs")]
    refused = [d for p, d in zip(procs, done, strict=True) if p.returncode != 0]
    o.expect(rcs[0] == 0 and rcs[1] in (0, 2, 5), f"exit codes {rcs}")
    o.expect(all("in use by another bakeoff" in "".join(d) for d in refused),
             "the second resume was not refused up front (it should say the run directory is in use)")
    return o.expect(len(points) == len(set(points)) == 16, f"{len(points)} samples, {len(set(points))} unique of 16")


def report_on_full_disk(t: Path) -> Outcome:
    """R19: ``bakeoff report`` that cannot write (EFBIG under a 48 KB file-size limit, as a full disk): one line,
    not exit 0/1/2, and the previous report files left whole."""
    run = finished_run(t)
    before = {p.name: p.stat().st_size for p in (run / "report").iterdir() if p.is_file()}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (48_000, 48_000))
    env = {**os.environ, "COLUMNS": "200", "BAKEOFF_PROBE": str(os.getpid())}
    done = subprocess.run([*BAKEOFF, "report", str(run)], cwd=t, env=env, capture_output=True, text=True,
                          timeout=60, preexec_fn=limit)
    o = judge(Outcome(done.returncode, done.stdout + done.stderr, t), is_run=False)
    after = {p.name: p.stat().st_size for p in (run / "report").iterdir() if p.is_file()}
    o.expect(done.returncode not in (0, 1, 2), f"exit {done.returncode} for a report that could not be written")
    return o.expect(after == before, f"report files changed: {before} -> {after}")


def stream_probe(t: Path, url: str, rc: int, flag: str | None = None, work: str = "") -> Outcome:
    """R13-R16: a stream fault ends with exit ``rc`` and (if given) ``flag`` on every sample."""
    path = attach_file(t, url)
    path.write_text(path.read_text().replace("workload: {", "workload: {" + work))
    o = ran(t, ["run", str(path), "--out", "runs"], timeout=BOUND_S)
    o.expect(o.rc == rc, f"exit {o.rc}, expected {rc}")
    rows = samples_of(t / "runs")
    if flag:
        flagged = sum(any(f.split(":")[0] == flag for f in r.get("flags") or []) for r in rows)
        o.expect(bool(rows) and flagged == len(rows), f"{flagged} of {len(rows)} samples flagged {flag}")
    return o


def bom_probe(t: Path, url: str) -> Outcome:
    """R14: a BOM before the first event loses no token: every sample has 16 token events."""
    o = stream_probe(t, url, 0)
    events = [r.get("token_events") for r in samples_of(t / "runs")]
    return o.expect(bool(events) and all(e == 16 for e in events), f"token_events {events}, 16 each expected")


def env_value_not_a_secret(t: Path) -> Outcome:
    """R7: an env value (2048) that also appears in stored JSON: outputs.jsonl stays JSON."""
    arms = ("{name: a, engine: sim, model: x, env: {MY_BATCH: '2048'}, options: {itl_ms: 0}}",
            "{name: b, engine: sim, model: x, options: {itl_ms: 0}}")
    work = "workload: {prompts: [prose], max_tokens: 2048, reps: 1, warmup: 0, gates: []}\n"
    o = run_file(t, sim_file(t, *arms, work=work))
    bad = 0
    lines = 0
    for path in (t / "runs").rglob("outputs.jsonl"):
        for line in path.read_bytes().splitlines():
            lines += 1
            try:
                json.loads(line)
            except ValueError:
                bad += 1
    return o.expect(lines > 0 and bad == 0, f"{bad} of {lines} outputs.jsonl lines are not JSON")


def ascii_stdout(t: Path) -> Outcome:
    """R8: PYTHONIOENCODING=ascii (the tables hold × ≈ ★ –): exit 0, no traceback."""
    o = ran(t, ["run", str(sim_file(t, sim_arm("a"), sim_arm("b"))), "--out", "runs"], {"PYTHONIOENCODING": "ascii"})
    return o.expect(o.rc == 0, f"exit {o.rc} with an ASCII stdout")


def ipv6_host(t: Path) -> Outcome:
    """R12: settings.host '::1': measured on IPv6 loopback, or a config error (2); never an internal error."""
    o = ran(t, ["run", str(sim_file(t, "{name: a, engine: sim, model: x, settings: {host: '::1'}}")), "--out", "runs"],
            is_run=False)
    tracebacks = list((t / "runs").rglob("traceback*")) if (t / "runs").exists() else []
    return o.expect(o.rc in (0, 2) and not tracebacks, f"exit {o.rc} (0 or 2 expected), traceback files {tracebacks}")


def faults2_probes(srv: HostileServer) -> dict[str, Probe]:
    p: dict[str, Probe] = {}
    # R1: response headers trickled a byte at a time (the deadline must cover the header phase)
    p["f2/R1/models-header-trickle"] = lambda t: bounded(t, srv.url("models_header_trickle"), "openai", (3,))
    p["f2/R1/props-header-trickle-llamacpp"] = lambda t: bounded(t, srv.url("props_header_trickle"), "llamacpp",
                                                                 (0, 3, 4))
    p["f2/R1/chat-header-trickle"] = lambda t: bounded(t, srv.url("header_trickle"), "openai", (3,))
    p["f2/R1/chat-header-trickle-via-proxy"] = lambda t: bounded(t, srv.url("header_trickle"), "openai", (3,),
                                                                 proxy_env(srv))
    # R2: masking linear in the text; an endless stream ends at its deadline
    p["f2/R2/2MB-event"] = lambda t: bounded(t, srv.url("big_event"), "openai", (0,))
    p["f2/R2/2MB-event-dashes"] = lambda t: bounded(t, srv.url("big_event_dashes"), "openai", (0,))
    p["f2/R2/infinite-stream"] = lambda t: bounded(t, srv.url("infinite"), "openai", (3,))
    # R3: the run directory vanishes mid-run
    p["f2/R3/run-dir-deleted"] = functools.partial(run_dir_vanishes, how="delete")
    p["f2/R3/run-dir-moved-then-resumed"] = functools.partial(run_dir_vanishes, how="move")
    # R4-R6: credentials sent; echoed keys masked in every spelling and field
    creds = srv.url("basic_required").replace("http://", "http://admin:pw-PROBE-1234@")
    p["f2/R4/url-credentials-sent"] = lambda t: stream_probe(t, creds, 0)
    p["f2/R4/url-credentials-not-stored"] = lambda t: key_probe(t, creds, "pw-PROBE-1234", extra="")
    p["f2/R5/key-cut-at-300"] = lambda t: key_probe(t, srv.url("key_cut"), KEY[:16])
    json_key = 'sk-PROBE"QUOTE\\SLASH-7777'
    p["f2/R5/key-json-escaped"] = lambda t: key_probe(t, srv.url("key_json_escaped"), "SLASH-7777", key=json_key)
    p["f2/R5/key-url-encoded"] = lambda t: key_probe(t, srv.url("key_urlencoded"), "URL%2BENC",
                                                     key="sk-PROBE/URL+ENC=8888")
    decoded = srv.url("echo_basic_decoded").replace("http://", "http://admin:p%40ss-SECRET-99@")
    p["f2/R5/url-password-decoded-via-proxy"] = lambda t: key_probe(t, decoded, "ss-SECRET-99", proxy_env(srv),
                                                                    extra="")
    p["f2/R6/key-in-finish-reason"] = lambda t: key_probe(t, srv.url("key_in_finish"), KEY[:20])
    p["f2/R7/env-value-in-stored-json"] = env_value_not_a_secret
    # R8: the console
    p["f2/R8/reader-gone-head-c1"] = functools.partial(reader_goes_away, first="byte")
    p["f2/R8/reader-gone-mid-run-head-n1"] = functools.partial(reader_goes_away, first="line")
    p["f2/R8/stdout-closed"] = stdout_closed
    p["f2/R8/ascii-stdout"] = ascii_stdout
    # R9: a stop signal while the report is written
    p["f2/R9/sigterm-during-report"] = sigterm_in_report
    # R10-R12: files that crashed, or failed only after launch
    one = "arms: [{name: a, engine: sim, model: x}]\nworkload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0}\n"
    p["f2/R10/lone-surrogate-prompt-name"] = lambda t: config_error(t, (
        'arms: [{name: a, engine: sim, model: x}]\nworkload: {suite: [{name: "\\uD800x", messages: '
        "[{role: user, content: hi}]}], max_tokens: 8, reps: 1, warmup: 0}\n"))
    p["f2/R10/lone-surrogate-run-name"] = lambda t: config_error(t, 'name: "run \\uDC80"\n' + one)
    p["f2/R11/600-level-yaml"] = lambda t: config_error(t, "arms: " + "[" * 600 + "]" * 600 + "\n")
    p["f2/R11/5000-level-options"] = lambda t: config_error(t, one.replace(
        "model: x}", "model: x, options: {x: " + "[" * 5000 + "]" * 5000 + "}}"))
    p["f2/R12/nan-temperature"] = lambda t: config_error(t, one.replace(
        "warmup: 0}", "warmup: 0, modes: [weird]}\nsampling: {weird: {temperature: .nan}}"))
    p["f2/R12/unresolvable-host"] = lambda t: config_error(t, one.replace(
        "model: x}", "model: x, settings: {host: no-such-host.invalid}}"))
    p["f2/R12/ipv6-host"] = ipv6_host
    p["f2/R12/build-json-not-an-object"] = build_json_not_an_object
    # R13-R16: stream faults that gave wrong numbers or a false stall
    p["f2/R13/two-usages-disagree"] = lambda t: stream_probe(t, srv.url("usage_two_disagree"), 3, "usage-conflict",
                                                             work="fixed_length: false, ")
    p["f2/R14/bom-before-first-event"] = lambda t: bom_probe(t, srv.url("bom"))
    p["f2/R15/two-choices"] = lambda t: stream_probe(t, srv.url("two_choices"), 0, "multiple-choices")
    p["f2/R16/keepalive-content-length"] = lambda t: stream_probe(t, srv.url("keepalive_cl"), 0)
    p["f2/R16/keepalive-chunked-split-end"] = lambda t: stream_probe(t, srv.url("keepalive_chunked"), 0)
    # R17-R19: processes, locks, report files
    p["f2/R17/sigkill-wrapper-engine"] = wrapper_engine_sigkill
    p["f2/R18/two-concurrent-resumes"] = concurrent_resumes
    p["f2/R19/report-cannot-be-written"] = report_on_full_disk
    return p


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", default=[], help="run the probes whose name holds this (repeatable)")
    args = ap.parse_args()
    os.environ["BAKEOFF_PROBE"] = str(os.getpid())
    counts = {k: 0 for k in KINDS}
    total = defective = 0
    with HostileServer() as srv, tempfile.TemporaryDirectory(prefix="bakeoff-probes-") as tmp:
        for name, probe in probes(srv).items():
            if args.only and not any(part in name for part in args.only):
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
                print(f"DEFECT {name}: rc={o.rc} {', '.join(kinds)}; {'; '.join(o.why)} {last_line}")
    print(f"\n{total} probes, {defective} defective")
    print("| " + " | ".join(KINDS) + " |")
    print("|" + "---:|" * len(KINDS))
    print("| " + " | ".join(str(counts[k]) for k in KINDS) + " |")
    return 1 if defective else 0


if __name__ == "__main__":
    sys.exit(main())
