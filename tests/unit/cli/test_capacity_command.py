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
