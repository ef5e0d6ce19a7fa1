"""FAULTS-3 sessions / load / config-bounds family (N9, N10, N11, N13, N14, N23): each reproduction of the review
run through the real ``bakeoff`` command line and held to its contract.

- N9: ``--resume`` of a conversations-file run whose file was edited since: refused naming the file (exit 2).
- N10: ``sessions`` with ``structured``: refused at load naming both fields.
- N11: sizes within every single bound that multiply past what can run: refused at load naming the bound, by
  ``check`` and ``run`` alike, before anything is launched.
- N13: a server claiming the whole prompt cached on every turn, the salted first one included: flagged.
- N14: a conversations line holding a raw U+2028 inside a string: one session, measured.
- N23: the sim's ``launch_speeds: [.nan]``: refused by ``check`` and ``run``.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
from pathlib import Path

from fault_probes import (
    Outcome,
    Probe,
    finish,
    popen,
    ran,
    samples_of,
    sim_arm,
    sim_file,
    wait_for_samples,
)
from hostile_server import HostileServer

QUICK = "max_tokens: 8, reps: 1, warmup: 0, gates: [], request_timeout_s: 5"
SES3 = "sessions: {synthetic: {sessions: 1, turns: 3, tool_result_tokens: 20, reply_tokens: 4}}"
CHECK_BOUND_S = 20  # a refusal at load is quick; the synthetic maxima used to hang check past 40 s


def _turns(prefix: str, words: int) -> str:
    """One session of 6 turns as a JSONL line."""
    messages = [{"role": "user", "content": f"{prefix} {i} " + "x " * words} if i % 2 == 0 else
                {"role": "assistant", "content": f"{prefix} answer {i}"} for i in range(12)]
    return json.dumps(messages) + "\n"


def refused_at_load(t: Path, work: str, words: str, command: str = "run", arm: str = sim_arm("a")) -> Outcome:
    """``bakeoff COMMAND`` of a file with this workload: exit 2 naming ``words``, nothing launched or stored."""
    path = sim_file(t, arm, work=f"workload: {{{work}}}\n")
    args = ["check", str(path)] if command == "check" else ["run", str(path), "--out", "runs"]
    o = ran(t, args, timeout=CHECK_BOUND_S if command == "check" else 60, is_run=False)
    o.expect(o.rc == 2, f"{command}: exit {o.rc}, expected 2 (refused at load)")
    o.expect(words in o.output, f"{command}: the refusal does not say {words!r}")
    return o.expect(not samples_of(t), f"{command}: samples were stored")


def resume_after_edit(t: Path) -> Outcome:
    """N9: SIGINT after 2 stored turns, a different conversation written over the file, ``--resume``."""
    (t / "conv.jsonl").write_text(_turns("question", 20))
    arm = sim_arm("a", ", itl_ms: 20").replace("itl_ms: 2, ", "")
    path = sim_file(t, arm, work="workload: {sessions: {file: conv.jsonl}, max_tokens: 16, reps: 1, warmup: 0, "
                                 "gates: []}\n")
    proc = popen(t, ["run", str(path), "--out", "runs"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_samples(t, 2, proc)
    proc.send_signal(signal.SIGINT)
    first = finish(proc, t, is_run=False)
    before = len(samples_of(t / "runs"))
    (t / "conv.jsonl").write_text(_turns("totally different", 200))
    run = next((t / "runs").iterdir())
    o = ran(t, ["run", "--resume", str(run)], is_run=False)
    o.defects += first.defects
    o.expect(o.rc == 2, f"resume of an edited conversations file: exit {o.rc}, expected 2")
    o.expect("conv.jsonl changed since the run started" in o.output, "the refusal does not name the changed file")
    return o.expect(len(samples_of(t / "runs")) == before, "the resume stored turns of the edited file")


def cold_turn_all_cached(t: Path, srv: HostileServer) -> Outcome:
    """N13: every turn of the liar claims its whole prompt cached: each flagged, no cache-hit ratio."""
    honest = f"{{name: base, engine: openai, url: '{srv.url('ok')}'}}"
    liar = f"{{name: liar, engine: openai, url: '{srv.url('cached_all')}'}}"
    path = sim_file(t, honest, liar, work=f"workload: {{{SES3}, {QUICK}}}\n")
    o = ran(t, ["run", str(path), "--out", "runs"])
    turns = [r for r in samples_of(t / "runs") if r.get("arm") == "liar"]
    flagged = sorted(int(r["turn"]) for r in turns
                     if any(f.startswith("cache-impossible") for f in r.get("flags") or []))
    o.expect(len(turns) == 3 and flagged == [0, 1, 2], f"cache-impossible on turns {flagged} of 3")
    summaries = list((t / "runs").rglob("summary.json"))
    ratio = json.loads(summaries[0].read_text())["sessions"]["arms"]["liar"].get("cache_hit_ratio") \
        if summaries else "no summary"
    return o.expect(ratio is None, f"the liar's cache_hit_ratio is {ratio}, expected none")


def u2028_line(t: Path) -> Outcome:
    """N14: a valid JSONL line whose content holds a raw U+2028: accepted, one session measured."""
    line = json.dumps([{"role": "user", "content": "para one\u2028para two"},
                       {"role": "assistant", "content": "ok"}], ensure_ascii=False)
    (t / "conv.jsonl").write_text(line + "\n", encoding="utf-8")
    o = ran(t, ["run", str(sim_file(t, sim_arm("a"), work=f"workload: {{sessions: {{file: conv.jsonl}}, {QUICK}}}\n")),
                "--out", "runs"])
    o.expect(o.rc == 0, f"exit {o.rc}, expected 0")
    return o.expect(len(samples_of(t / "runs")) == 1, f"{len(samples_of(t / 'runs'))} turns stored, 1 expected")


def probes(srv: HostileServer) -> dict[str, Probe]:
    p: dict[str, Probe] = {}
    p["f3/N9/resume-after-conversations-edit"] = resume_after_edit
    p["f3/N10/sessions-with-structured"] = lambda t: refused_at_load(
        t, f"{SES3}, {QUICK}, structured: {{kinds: [json_schema]}}", "'sessions' cannot be combined with 'structured'")
    bomb = "sessions: {synthetic: {sessions: 10000, turns: 10000, tool_result_tokens: 1000000}}"
    nan_arm = "{name: a, engine: sim, model: x, options: {launch_speeds: [.nan]}}"
    loads = {  # N11 and N23: each refused by check and run alike, with the same words
        "N11/synthetic-maxima": (f"{bomb}, {QUICK}", "more than the 10,000,000 the sessions may hold", sim_arm("a")),
        "N11/rate-times-duration": (f"prompts: [prose], {QUICK}, arrival: {{rates: [1000], duration_s: 86400}}",
                                    "schedules 86,400,000 requests, more than the 1,000,000", sim_arm("a")),
        "N11/rate-1e9": (f"prompts: [prose], {QUICK}, arrival: {{rates: [1e9], duration_s: 86400}}",
                         "rate 1e+09 is more than the 1,000,000 requests per second", sim_arm("a")),
        "N11/rate-1e-300": (f"prompts: [prose], {QUICK}, arrival: {{rates: [1e-300], requests: 2, "
                            "distribution: constant}", "more than the 86,400 s", sim_arm("a")),
        "N11/concurrency-1e9": (f"prompts: [prose], {QUICK}, concurrency: [1000000000]",
                                "is more than 10,000, the most streams", sim_arm("a")),
        "N23/launch-speeds-nan": (f"prompts: [prose], {QUICK}",
                                  "options.launch_speeds[0]: Input should be a finite number", nan_arm),
    }
    for name, (work, words, arm) in loads.items():
        for command in ("check", "run"):
            p[f"f3/{name}-{command}"] = functools.partial(refused_at_load, work=work, words=words, command=command,
                                                          arm=arm)
    p["f3/N13/cold-turn-claims-all-cached"] = lambda t: cold_turn_all_cached(t, srv)
    p["f3/N14/u2028-inside-a-string"] = u2028_line
    return p
