"""FAULTS-3 verdicts, exit codes, the gate and signals: N8 (a verdict from a single pair), N12 (exit 0 when no
sample enters a statistic), N18 (a gate whose candidate build does not exist) and R9 narrowed (SIGTERM after
the run's ``finished_at``, while its exit code is read).

Each probe runs the real ``bakeoff`` command line and holds it to its contract: "too few pairs" instead of a
verdict, exit 3 for nothing valid, exit 2 before anything is measured, 130 (or 0) on a stop signal.
"""

from __future__ import annotations

import functools
import json
import signal
import time
from pathlib import Path
from typing import Any

from fault_probes import (
    Outcome,
    Probe,
    finish,
    ran,
    run_until_finished,
    samples_of,
    sim_arm,
    sim_file,
    wrapped_llama,
)
from hostile_server import HostileServer

QUICK = "max_tokens: 8, reps: 1, warmup: 0, gates: [], request_timeout_s: 5"
SES3 = "sessions: {synthetic: {sessions: 1, turns: 3, tool_result_tokens: 20, reply_tokens: 4}}"
# the flags that keep a sample out of every statistic (core/analysis/stats.py EXCLUDING_FLAGS)
EXCLUDING = ("burst-delivery", "count-witness-mismatch", "counter-invariant")


def two_sims(t: Path, work: str, head: str = "") -> Path:
    """Two sim arms a and b, b slower (4 and 6 ms between tokens), with ``work`` as the workload line."""
    return sim_file(t, sim_arm("a", ", itl_ms: 4").replace("itl_ms: 2, ", ""),
                    sim_arm("b", ", itl_ms: 6").replace("itl_ms: 2, ", ""), head=head, work=work)


def summary_of(t: Path) -> dict[str, Any]:
    [path] = list((t / "runs").glob("*/report/summary.json"))
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def report_md(t: Path) -> str:
    return "".join(p.read_text() for p in (t / "runs").glob("*/report/report.md"))


def no_verdict_from_one_pair(o: Outcome, t: Path, where: str, read: Any) -> Outcome:
    """The run ends 0 and the comparison ``read`` picks from summary.json says 'too few pairs', as report.md."""
    o.expect(o.rc == 0, f"exit {o.rc}, expected 0")
    if o.rc != 0:
        return o
    got = read(summary_of(t))
    o.expect(got == "too few pairs", f"{where}: verdict {got!r} from fewer pairs than a verdict needs")
    md = report_md(t)
    return o.expect(not any(w in md for w in (") faster", ") slower", ") equivalent")),
                    "report.md prints a verdict beside an interval of too few pairs")


def session_one_pair(t: Path) -> Outcome:
    """N8 (SES-13): one session, one rep: session time from one paired replay."""
    o = ran(t, ["run", str(two_sims(t, f"workload: {{{SES3}, {QUICK}}}\n")), "--out", "runs"])
    return no_verdict_from_one_pair(o, t, "session time",
                                    lambda s: (s.get("sessions") or {}).get("comparisons", {}).get("b", {})
                                    .get("verdict"))


def load_point_one_request(t: Path) -> Outcome:
    """N8 (LOAD-17): an open-loop point of one request a side."""
    work = ("workload: {prompts: [prose], max_tokens: 16, reps: 1, warmup: 0, gates: [], "
            "arrival: {rates: [2], requests: 1}}\n")
    o = ran(t, ["run", str(two_sims(t, work)), "--out", "runs"])
    return no_verdict_from_one_pair(o, t, "load point", lambda s: next(
        ((p.get("vs_baseline") or {}).get("verdict") for p in (s.get("load") or {}).get("points", [])
         if p.get("arm") == "b"), None))


def head_to_head_one_rep(t: Path) -> Outcome:
    """N8: the main table of one prompt, one rep, one pass: one paired request."""
    o = ran(t, ["run", str(two_sims(t, "workload: {prompts: [prose], max_tokens: 16, reps: 1, warmup: 0, "
                                       "gates: []}\n")), "--out", "runs"])
    return no_verdict_from_one_pair(o, t, "head-to-head", lambda s: next(
        (c.get("verdict") for c in s.get("comparisons", []) if c.get("arm") == "b"), None))


def gate_three_pairs(t: Path) -> Outcome:
    """N8, the gate: an A/A gate of 3 passes of one request each (max_passes 3): 3 pairs are too few for a
    verdict, so the gate is inconclusive (6), never green."""
    head = "gate: {reference: a, candidate: b, max_slowdown: 10%, max_passes: 3}\n"
    arms = [sim_arm(n, ", itl_ms: 1").replace("itl_ms: 2, ", "") for n in "ab"]
    path = sim_file(t, *arms, head=head, work="workload: {prompts: [prose], max_tokens: 8, reps: 1, passes: 3, "
                                                "warmup: 0, gates: []}\n")
    o = ran(t, ["gate", str(path), "--out", "runs"], is_run=False)
    o.expect(o.rc == 6, f"exit {o.rc} from a gate of 3 paired requests, expected 6 (inconclusive)")
    return o.expect("too few pairs" in o.output, "the gate line does not say the pairs are too few")


def nothing_enters_the_statistics(t: Path, mode: str, srv: HostileServer) -> Outcome:
    """N12 (WIT-02..05): every sample flagged by its count witnesses and left out of the statistics: exit 3."""
    path = t / "b.yaml"
    path.write_text(f"arms: [{{name: base, engine: openai, url: '{srv.url(mode)}'}}]\n"
                    "workload: {prompts: [prose], max_tokens: 16, reps: 1, warmup: 0, gates: [], "
                    "fixed_length: false}\n")
    o = ran(t, ["run", str(path), "--out", "runs"], is_run=False)
    rows = samples_of(t / "runs")
    left_out = [r for r in rows if any(str(f).split(":")[0] in EXCLUDING for f in r.get("flags") or [])]
    o.expect(bool(rows) and len(left_out) == len(rows), f"{len(left_out)} of {len(rows)} samples left out of the "
                                                        "statistics: the probe's premise does not hold")
    return o.expect(o.rc == 3, f"exit {o.rc} with no sample in any statistic, expected 3 (nothing valid measured)")


def gate_missing_build(t: Path) -> Outcome:
    """N18 (GATE-03): a gate whose candidate options.binary does not exist: exit 2 naming the field and the path,
    before the reference is measured; no advice to build llama.cpp."""
    ref = wrapped_llama(t).replace("name: l,", "name: ref,")
    cand = ref.replace("name: ref,", "name: cand,").split("binary: ")[0] + "binary: './nope/llama-server'}}"
    head = "gate: {reference: ref, candidate: cand, max_slowdown: 10%}\n"
    path = sim_file(t, ref, cand, head=head, work="workload: {prompts: [prose], max_tokens: 8, reps: 1, passes: 3, "
                                                  "warmup: 0, gates: []}\n")
    o = ran(t, ["gate", str(path), "--out", "runs"], is_run=False)
    said = " ".join(o.output.split())
    o.expect(o.rc == 2, f"exit {o.rc}, expected 2 (configuration error, nothing ran)")
    o.expect("options.binary" in said and "nope/llama-server" in said, "the error names no field and path")
    o.expect("engines install" not in said, "advice to build llama.cpp for a wrong path")
    return o.expect(not samples_of(t / "runs") if (t / "runs").exists() else True,
                    f"{len(samples_of(t / 'runs'))} samples measured before the refusal")


def sigterm_after_finished(t: Path, delay_s: float) -> Outcome:
    """R9 (SIG-01, SIG-03): SIGTERM ``delay_s`` after run.json gets ``finished_at`` (reports written, the exit
    code being read): an interruption (130) or a finished run (0), never death by the signal."""
    proc = run_until_finished(t, 1, 90)
    time.sleep(delay_s)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    o = finish(proc, t, is_run=False)
    return o.expect(o.rc in (0, 130), f"exit {o.rc} on SIGTERM {delay_s} s after finished_at, expected 130 (or 0)")


def probes(srv: HostileServer) -> dict[str, Probe]:
    p: dict[str, Probe] = {
        "f3/N8/session-time-one-pair": session_one_pair,
        "f3/N8/load-point-one-request": load_point_one_request,
        "f3/N8/head-to-head-one-rep": head_to_head_one_rep,
        "f3/N8/gate-three-pairs-inconclusive": gate_three_pairs,
        "f3/N18/gate-candidate-binary-missing": gate_missing_build,
        "f3/R9/sigterm-0.85s-after-finished": functools.partial(sigterm_after_finished, delay_s=0.85),
        "f3/R9/sigterm-1.2s-after-finished": functools.partial(sigterm_after_finished, delay_s=1.2),
    }
    for mode, what in (("ids_lie", "usage-half-the-ids"), ("ids_dup", "every-event-twice"),
                       ("ids_withheld", "half-the-events-withheld"), ("ids_cumulative", "cumulative-ids")):
        p[f"f3/N12/{what}"] = functools.partial(nothing_enters_the_statistics, mode=mode, srv=srv)
    return p
