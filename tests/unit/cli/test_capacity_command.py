"""``bakeoff capacity`` end to end on the sim engine (real server processes, loopback): two arms with planted
capacities 3 and 5 streams and a 5x cliff above them; the search must bracket each, name TTFT as binding, label
the cliff, and say the second arm carries more, in every format (terminal, capacity.json, summary.json, export)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bakeoff.core.cli.full_app import app

FILE = """name: cap
arms:
  - {name: small, engine: sim, model: sim, options: {itl_ms: 1, ttft_ms: 20, capacity_streams: 3, capacity_cliff: 5,
                                                    admission_ms: 30}}
  - {name: large, engine: sim, model: sim, options: {itl_ms: 1, ttft_ms: 20, capacity_streams: 5, capacity_cliff: 5,
                                                    admission_ms: 30}}
workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, gates: [], text_witness: false}
baseline: small
capacity:
  constraints: [{metric: ttft_s, percentile: 90, max_s: 0.09}]
  start: 1
  max: 16
  replicates: 2
"""


def test_capacity_finds_both_boundaries_on_the_sim(tmp_path: Path) -> None:
    path = tmp_path / "cap.yaml"
    path.write_text(FILE)
    result = CliRunner().invoke(app, ["capacity", str(path), "--out", str(tmp_path / "runs")],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    cap = json.loads((run / "capacity.json").read_text())
    arms = {a["arm"]: a for a in cap["arms"]}
    assert (arms["small"]["held"], arms["small"]["failed"]) == (3, 4)
    assert (arms["large"]["held"], arms["large"]["failed"]) == (5, 6)
    assert all(a["binding"] == "TTFT p90 ≤ 90 ms" and a["shape"] == "cliff" for a in arms.values())
    (cmp,) = cap["comparisons"]
    assert cmp["verdict"] == "carries more" and cmp["ratio"]["lo"] <= 5 / 3 <= cmp["ratio"]["hi"]
    assert "large carries" in result.output and "the streams at TTFT p90 ≤ 90 ms" in result.output
    # what the user reads first is the search's answer, not a ratio of decode rates pooled over its probes
    assert "recommendation large carries" in " ".join(result.output.split()), result.output
    section = result.output[result.output.index("Capacity at"):result.output.index("capacity: ")]
    assert all(len(line) <= 80 for line in section.splitlines()), section
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["capacity"]["comparisons"][0]["verdict"] == "carries more"
    assert "large carries" in (run / "report" / "report.md").read_text()
    exported = CliRunner().invoke(app, ["export", str(run), "--format", "jsonl", "--out", str(tmp_path / "x")])
    assert exported.exit_code == 0, exported.output
    rows = [json.loads(line) for f in (tmp_path / "x").glob("points*") for line in f.read_text().splitlines()]
    capacity = [r for r in rows if r.get("table") == "capacity"]
    assert {r["arm"] for r in capacity} == {"small", "large"} and any(r.get("verdict") == "carries more"
                                                                      for r in capacity)


RATE = """name: cap-rate
arms:
  - {name: slow, engine: sim, model: sim,
     options: {itl_ms: 2, ttft_ms: 20, ttft_ms_per_stream: 15}}
workload:
  prompts: [prose]
  max_tokens: 8
  reps: 1
  warmup: 0
  gates: []
  text_witness: false
  arrival: {rates: [1], distribution: constant, requests: 30, seed: 0}
capacity:
  load: rate
  constraints: [{metric: ttft_s, percentile: 90, max_s: 0.1}]
  start: 8
  max: 512
  growth: 4
  resolution: 0.3
  replicates: 1
  backlog: 3
"""


def test_open_loop_search_cuts_an_over_saturated_rate(tmp_path: Path) -> None:
    """TTFT grows 15 ms per request in flight, so past some rate the queue feeds itself: that rate's schedule is
    cut once more than 3 x its 1 slot (the sim reports
    none) are in flight, its unsent requests stored as errors, the rate failing."""
    path = tmp_path / "rate.yaml"
    path.write_text(RATE)
    result = CliRunner().invoke(app, ["capacity", str(path), "--out", str(tmp_path / "runs")],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    (arm,) = json.loads((run / "capacity.json").read_text())["arms"]
    assert arm["held"] is not None and arm["failed"] is not None and arm["held"] < arm["failed"]
    cut = [row for row in arm["levels"] if row["cut"]]
    assert cut and all(not row["held"] for row in cut) and "backlog" in cut[0]["cut"]
    assert "over-saturated, cut early at" in result.output
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    unsent = [s for s in samples if s["status"] != "ok"]
    assert unsent and all("not sent" in (s["error"] or "") for s in unsent)


ANSWER = '{"customer":"Ada","items":[{"name":"pen","quantity":2,"unit_price":4.5}]}'  # valid for json_order
KINDS = f"""name: cap-kinds
arms:
  - {{name: small, engine: sim, model: sim, options: {{itl_ms: 1, ttft_ms: 20, capacity_streams: 3,
     structured_capacity_streams: 2, capacity_cliff: 5, admission_ms: 30, tokens_per_event: 8,
     grammar_answer: '{ANSWER}'}}}}
  - {{name: large, engine: sim, model: sim, options: {{itl_ms: 1, ttft_ms: 20, capacity_streams: 5,
     structured_capacity_streams: 4, capacity_cliff: 5, admission_ms: 30, tokens_per_event: 8,
     grammar_answer: '{ANSWER}'}}}}
workload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, gates: [], text_witness: false,
           structured: {{kinds: [json_schema]}}}}
baseline: small
capacity:
  constraints: [{{metric: ttft_s, percentile: 90, max_s: 0.09}}]
  start: 1
  max: 16
  replicates: 2
"""


def test_capacity_per_kind_finds_plain_and_structured_boundaries(tmp_path: Path) -> None:
    """workload.structured adds a second search: the structured requests' own planted capacities (2 and 4 under
    the grammar, 3 and 5 plain) are bracketed per kind, each kind paired with itself, in every format."""
    path = tmp_path / "kinds.yaml"
    path.write_text(KINDS)
    result = CliRunner().invoke(app, ["capacity", str(path), "--out", str(tmp_path / "runs")],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    cap = json.loads((run / "capacity.json").read_text())
    assert cap["kinds"] == ["plain", "structured"]
    brackets = {(a["arm"], a["kind"]): (a["held"], a["failed"]) for a in cap["arms"]}
    assert brackets == {("small", "plain"): (3, 4), ("small", "structured"): (2, 3),
                        ("large", "plain"): (5, 6), ("large", "structured"): (4, 5)}
    ratios = {c["kind"]: c for c in cap["comparisons"]}
    assert ratios["plain"]["ratio"]["lo"] <= 5 / 3 <= ratios["plain"]["ratio"]["hi"]
    assert ratios["structured"]["ratio"]["lo"] <= 4 / 2 <= ratios["structured"]["ratio"]["hi"]
    assert all(c["verdict"] == "carries more" for c in ratios.values())
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    structured = [s for s in samples if s["structured"]]
    assert structured and all(s["valid"] for s in structured) and all(s["prompt"] == "json_order"
                                                                     for s in structured)
    section = result.output[result.output.index("Capacity at"):result.output.index("capacity: ")]
    assert all(len(line) <= 80 for line in section.splitlines()), section
    assert "large carries" in section and "the structured streams at TTFT p90" in section.replace("\n", " ")
    rows = [line.split() for line in section.splitlines()]
    assert rows[[r[:1] for r in rows].index(["large"]) + 1][:3] == ["large", "structured", "4"]
    assert "| large | structured | 4 (" in (run / "report" / "report.md").read_text()
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert [a["kind"] for a in summary["capacity"]["arms"]] == ["plain", "structured"] * 2
    exported = CliRunner().invoke(app, ["export", str(run), "--format", "jsonl", "--out", str(tmp_path / "x")])
    assert exported.exit_code == 0, exported.output
    rows_out = [json.loads(line) for f in (tmp_path / "x").glob("points*") for line in f.read_text().splitlines()]
    kinds = {(r["arm"], r["kind"], r.get("verdict") is not None) for r in rows_out if r.get("table") == "capacity"}
    assert kinds == {("small", "plain", False), ("small", "structured", False), ("large", "plain", False),
                     ("large", "structured", False), ("large", "plain", True), ("large", "structured", True)}


# the same two sim arms, the load being sessions replayed at once
SESSIONS = FILE.replace("workload: {prompts: [prose], max_tokens: 8,",
                        "workload: {sessions: {synthetic: {sessions: 2, turns: 2, tool_result_tokens: 20, "
                        "reply_tokens: 4}}, max_tokens: 8,")
assert SESSIONS != FILE


def test_capacity_of_sessions_counts_agents_replayed_at_once(tmp_path: Path) -> None:
    """workload.sessions: the load is N sessions replayed at once, every turn a request the SLOs judge. The sim's
    cliff above 3 and 5 requests in flight is met by 4 and 6 concurrent replays (their turns overlap), so the
    brackets are the planted capacities, the paired interval covers 5/3, and every format names the kind."""
    path = tmp_path / "sessions.yaml"
    path.write_text(SESSIONS)
    result = CliRunner().invoke(app, ["capacity", str(path), "--out", str(tmp_path / "runs")],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    cap = json.loads((run / "capacity.json").read_text())
    assert cap["kinds"] == ["sessions"] and cap["schema_version"] == 2
    brackets = {(a["arm"], a["kind"]): (a["held"], a["failed"]) for a in cap["arms"]}
    assert brackets == {("small", "sessions"): (3, 4), ("large", "sessions"): (5, 6)}
    (cmp,) = cap["comparisons"]
    assert cmp["kind"] == "sessions" and cmp["verdict"] == "carries more"
    assert cmp["ratio"]["lo"] <= 5 / 3 <= cmp["ratio"]["hi"]
    section = result.output[result.output.index("Capacity at"):result.output.index("capacity: ")]
    assert "large carries" in section and "the concurrent sessions at TTFT p90" in section.replace("\n", " ")
    assert "small at 4 sessions at once (replicate 1): fails" in result.output
    assert "small at 1 session at once (replicate 1): holds" in result.output
    assert "| large | sessions | 5 (" in (run / "report" / "report.md").read_text()
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert [a["kind"] for a in summary["capacity"]["arms"]] == ["sessions", "sessions"]

    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["session"] is not None and s["turn"] in (0, 1) for s in samples)
    at4 = [s for s in samples if s["arm"] == "large" and s["concurrency"] == 4 and s["rep"] == 0]
    # 4 replays of the 2 sessions, each its own conversation (named apart), each with both turns, in order
    replays = {s["session"] for s in at4}
    assert replays == {"s0@4#0", "s1@4#1", "s0@4#2", "s1@4#3"} and len(at4) == 8
    for name in replays:
        turns = sorted((s for s in at4 if s["session"] == name), key=lambda s: s["turn"])
        assert [t["turn"] for t in turns] == [0, 1]
        assert turns[0]["started_at"] + turns[0]["e2e_s"] <= turns[1]["started_at"] + 1e-3  # a replay waits
    # really at once: some moment has all 4 replays' turns in flight
    spans = [(s["started_at"], s["started_at"] + s["e2e_s"]) for s in at4]
    assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) == 4
