"""`bakeoff report` on a real llama.cpp n-max sweep writes the n-max table, with median intervals and paired
verdicts against the baseline, into report.md, report.html and summary.json (not only the terminal)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.analysis.stats import MIN_PAIRS

pytestmark = pytest.mark.integration

NMAX = """\
name: nmax-report
baseline: spec-off
arms:
  - name: spec-off
    engine: llamacpp
    model: smollm2
    settings: {ctx: 1024, threads: 2}
  - name: draft
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2}
    settings: {ctx: 1024, threads: 2}
    sweep: {speculative.n_max: [1, 2]}
workload: {prompts: [code_python], max_tokens: 16, reps: 2, warmup: 1, warmup_settle: null, gates: []}
"""

# "1.234× (1.100–1.380) faster": a paired ratio with its interval and the verdict that interval allows
VERDICT = re.compile(r"(\d+\.\d+)× \((\d+\.\d+)–(\d+\.\d+)\) (faster|slower|equivalent|not separable|too few pairs)")


def _verdict_of(lo: float, hi: float, pairs: int) -> str:
    if pairs < MIN_PAIRS:  # the interval of so few pairs is their bare range: no verdict
        return "too few pairs"
    if lo > 1 or hi < 1:
        return "faster" if lo > 1 else "slower"
    return "equivalent" if lo >= 0.97 and hi <= 1.03 else "not separable"  # within 1 ± 3 %: an equivalence test


def test_report_writes_the_nmax_table_into_markdown_html_and_json(llama_server: Path, smollm2: Path,
                                                                   tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "nmax.yaml"
    cfg.write_text(NMAX)
    out = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200"}
    ran = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(out)], capture_output=True, text=True,
                         timeout=900, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    for f in (run / "report").iterdir():  # the report command alone must write them
        f.unlink()
    report = subprocess.run([bakeoff_cli, "report", str(run), "--tables"], capture_output=True, text=True, timeout=300,
                            env=env)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "n-max sweep" in report.stdout

    # n_max read back from the running engine (llama-server reports it as /metrics' per-position counters)
    starts = [json.loads(line) for line in (run / "arm_records.jsonl").read_text().splitlines()]
    read_back = {s["arm"]: s["record"]["effective"].get("n_max") for s in starts}
    assert read_back == {"spec-off": None, "draft-n_max1": 1, "draft-n_max2": 2}, read_back
    assert not [m for s in starts for m in s["record"]["mismatches"] if "n_max" in m]

    summary = json.loads((run / "report" / "summary.json").read_text())
    table = summary["sweep"]
    assert table["title"] == "n-max sweep" and table["keys"] == ["speculative.n_max"]
    rows = {r["arm"]: r for r in table["rows"]}
    assert list(rows) == ["spec-off", "draft-n_max1", "draft-n_max2"]
    assert rows["spec-off"]["is_baseline"] and rows["spec-off"]["vs_baseline"] is None
    for arm, n in (("draft-n_max1", 1), ("draft-n_max2", 2)):
        row = rows[arm]
        assert row["point"] == {"speculative.n_max": n} and row["n"] == 2
        d = row["decode"]
        assert 0 < d["lo"] <= d["estimate"] <= d["hi"] and d["n"] == 2
        acc = row["acceptance"]
        assert acc["drafted"] > 0 and acc["drafts"] > 0 and acc["drafted"] <= n * acc["drafts"]  # <= n_max per step
        vs = row["vs_baseline"]
        assert vs["reference"] == "spec-off" and vs["ratio"]["n"] == 2  # paired request by request
        assert vs["verdict"] == _verdict_of(vs["ratio"]["lo"], vs["ratio"]["hi"], vs["ratio"]["n"])

    md = (run / "report" / "report.md").read_text()
    assert "**n-max sweep**" in md
    for arm, n in (("draft-n_max1", 1), ("draft-n_max2", 2)):
        line = next(x for x in md.splitlines() if x.startswith(f"| {arm} | {n} |"))
        m = VERDICT.search(line)
        assert m is not None, line
        ratio = rows[arm]["vs_baseline"]["ratio"]
        assert float(m.group(1)) == pytest.approx(ratio["estimate"], abs=6e-4) and m.group(4) == _verdict_of(
            float(m.group(2)), float(m.group(3)), ratio["n"])
        assert f"{rows[arm]['decode']['estimate']:.1f} (" in line  # the median with its interval

    html = (run / "report" / "report.html").read_text()
    assert "<h2>n-max sweep</h2>" in html and '<table id="sweep">' in html
    for arm, n in (("draft-n_max1", 1), ("draft-n_max2", 2)):
        start = html.index(f'<tr data-arm="{arm}"><td>{arm}</td><td>{n}</td>', html.index('<table id="sweep">'))
        row_html = html[start:html.index("</tr>", start)]
        assert VERDICT.search(row_html) and rows[arm]["vs_baseline"]["verdict"] in row_html


OVERRIDDEN = """\
name: nmax-overridden
arms:
  - name: draft
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2, n_max: 2}
    settings: {ctx: 1024, threads: 2}
    extra_args: ["--spec-draft-n-max", "3"]  # the engine's last word wins: it runs 3
workload: {prompts: [code_python], max_tokens: 8, reps: 1, warmup: 0, gates: []}
"""


def test_an_n_max_the_engine_does_not_run_is_a_settings_mismatch(llama_server: Path, smollm2: Path,
                                                                 tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "overridden.yaml"
    cfg.write_text(OVERRIDDEN)
    out = tmp_path / "runs"
    ran = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(out)], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "COLUMNS": "200"})
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    (start,) = [json.loads(line) for line in (run / "arm_records.jsonl").read_text().splitlines()]
    assert start["record"]["effective"]["n_max"] == 3, ran.stdout + ran.stderr
    said = "/metrics says draft positions (spec_decode_num_accepted_tokens_per_pos_total) 3"
    assert f"asked speculative.n_max 2, {said}" in start["record"]["mismatches"]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all("settings-mismatch" in s["flags"] for s in samples)
