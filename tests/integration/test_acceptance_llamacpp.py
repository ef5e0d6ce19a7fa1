"""Acceptance in one shape from a real llama-server: SmolLM2 drafting for itself (n_max 3) and ngram map-k.

Every sample's per-position counts, rates and step histogram come from ``/metrics`` deltas; they must agree
with the response's timings and with the ``draft acceptance … mean len`` line llama-server logs per request,
and summary.json, report.md and report.html must carry the pooled figures and both plots.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bakeoff.core.reports import summarize_run
from bakeoff.core.results.sample import Sample

pytestmark = pytest.mark.integration

RUN = """\
name: acceptance
baseline: spec-off
arms:
  - name: spec-off
    engine: llamacpp
    model: smollm2
    settings: {ctx: 1024, threads: 2}
  - name: draft
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2, n_max: 3}
    settings: {ctx: 1024, threads: 2}
  - name: ngram
    engine: llamacpp
    model: smollm2
    speculative: {method: ngram, variant: map-k, n_max: 4, lookup_max: 2}
    settings: {ctx: 1024, threads: 2}
workload: {prompts: [code_python, code_bash], max_tokens: 64, reps: 2, warmup: 1, warmup_settle: null, gates: []}
"""
MEAN_LEN = re.compile(r"draft acceptance = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\), mean len =\s*([\d.]+)")


def _check_sample(s: Sample, n_max: int) -> None:
    """The identities every speculating request must satisfy, read from three engine counters."""
    assert s.acceptance_unavailable == {}, s.acceptance_unavailable
    if not s.drafted:
        return
    assert s.drafts and s.accepted is not None
    per_pos, hist, rates = s.accepted_per_position, s.accepted_histogram, s.acceptance_per_position
    assert per_pos is not None and hist is not None and rates is not None
    # llama-server sizes the counters to its largest n_max; positions past the arm's n_max stay empty
    assert len(per_pos) >= n_max and not any(per_pos[n_max:]) and sum(per_pos) == s.accepted
    assert sum(hist) == s.drafts and sum(k * c for k, c in enumerate(hist)) == s.accepted
    assert rates == pytest.approx([c / s.drafts for c in per_pos])
    assert s.mean_accepted_len == pytest.approx(1 + s.accepted / s.drafts)
    assert s.acceptance_derived["accepted_histogram"].startswith("exact:")


def test_acceptance_detail_from_a_real_llama_server(llama_server: Path, smollm2: Path, tmp_path: Path,
                                                    run_bakeoff: Callable[[Path], tuple[Path, list[Sample]]]) -> None:
    cfg = tmp_path / "acceptance.yaml"
    cfg.write_text(RUN)
    run, samples = run_bakeoff(cfg)
    ok = {arm: [s for s in samples if s.arm == arm and s.status == "ok"] for arm in ("spec-off", "draft", "ngram")}
    assert all(len(v) == 4 for v in ok.values()), {k: len(v) for k, v in ok.items()}

    for s in ok["draft"]:
        _check_sample(s, 3)
    for s in ok["ngram"]:
        _check_sample(s, 4)
    assert all(s.drafted for s in ok["draft"]), "self-drafting always proposes"
    assert all(s.accepted_histogram is None and s.drafted is None for s in ok["spec-off"])

    # the engine's own per-request log line: same counts, and its mean len (2 decimals) is ours
    logs = sorted(p for p in run.rglob("engine-pass*.log") if p.parent.name == "draft")
    log = "".join(p.read_text(errors="replace") for p in logs)
    assert log, sorted(str(p.relative_to(run)) for p in run.rglob("*.log"))
    logged = [(int(a), int(g), float(m)) for a, g, m in MEAN_LEN.findall(log)]
    for s in ok["draft"]:
        assert any((a, g) == (s.accepted, s.drafted) and abs(m - (s.mean_accepted_len or 0)) < 0.006
                   for a, g, m in logged), (s.accepted, s.drafted, s.mean_accepted_len, logged)

    summary = json.loads((run / "report" / "summary.json").read_text())
    pooled = {a["arm"]: a for a in summary["acceptance"]}
    assert set(pooled) == {"draft", "ngram"}
    draft = pooled["draft"]
    assert draft["drafts"] == sum(s.drafts or 0 for s in ok["draft"])
    assert draft["accepted_histogram"] == [sum(col) for col in zip(*(s.accepted_histogram or [] for s in ok["draft"]),
                                                                    strict=True)]
    assert len(draft["acceptance_per_position"]) == 3 and draft["unavailable"] == {}
    assert summarize_run(run).acceptance[0].arm == "draft"

    md = (run / "report" / "report.md").read_text()
    assert "**Acceptance per speculative arm**" in md
    row = next(x for x in md.splitlines() if x.startswith("| draft |") and "timings" in x)
    assert " ".join(f"{k}:{n}" for k, n in enumerate(draft["accepted_histogram"]) if n) in row
    html = (run / "report" / "report.html").read_text()
    assert 'id="plot-acceptance_histogram"' in html and 'id="plot-acceptance_per_position"' in html
    assert '<table id="acceptance">' in html
    print(f"draft: {draft['accepted']}/{draft['drafted']} in {draft['drafts']} steps, mean len "
          f"{draft['mean_accepted_len']:.2f}, per position {draft['acceptance_per_position']}, histogram "
          f"{draft['accepted_histogram']}; ngram: {pooled['ngram']['accepted']}/{pooled['ngram']['drafted']} "
          f"histogram {pooled['ngram']['accepted_histogram']}")
    fixture = os.environ.get("BAKEOFF_KEEP_ACCEPTANCE_RUN")  # to refresh tests/fixtures/reports/acceptance-run
    if fixture:
        Path(fixture).mkdir(parents=True, exist_ok=True)
        for name in ("run.json", "samples.jsonl"):
            (Path(fixture) / name).write_text((run / name).read_text())
