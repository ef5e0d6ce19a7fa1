"""The sweep, depth and concurrency sections: the main table's statistics, in every report format."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.config.schema import Arm, Speculative
from bakeoff.core.reports import render_html, render_markdown, summarize_run, write_reports
from bakeoff.core.reports.points import concurrency_table, depth_table, sweep_table
from bakeoff.core.reports.tables import point_rows
from bakeoff.core.results.sample import Sample

Maker = Callable[..., Path]


def _sample(arm: str, tps: float, rep: int, *, drafted: int | None = None, accepted: int | None = None,
            drafts: int | None = None, depth: int | None = None, pass_index: int = 0) -> Sample:
    return Sample(arm=arm, engine="llamacpp", prompt="p", mode="greedy", rep=rep, pass_index=pass_index,
                  decode_tps=tps, drafted=drafted, accepted=accepted, drafts=drafts, depth=depth)


def _arms() -> list[Arm]:
    def draft(n_max: int) -> Speculative:
        return Speculative(method="draft", draft_model="d.gguf", n_max=n_max)

    return [Arm(name="off", engine="llamacpp", model="m"),
            Arm(name="d-n_max1", engine="llamacpp", model="m", speculative=draft(1), swept={"speculative.n_max": 1}),
            Arm(name="d-n_max4", engine="llamacpp", model="m", speculative=draft(4), swept={"speculative.n_max": 4})]


def test_nmax_rows_carry_median_intervals_acceptance_and_paired_verdicts() -> None:
    jitter = [0.99, 1.01, 1.0, 0.98, 1.02, 1.0]
    samples = [_sample("off", 50 * j, r) for r, j in enumerate(jitter)]
    samples += [_sample("d-n_max1", 70 * j, r, drafted=30, accepted=27, drafts=30) for r, j in enumerate(jitter)]
    samples += [_sample("d-n_max4", 50 * j2, r, drafted=100, accepted=50, drafts=25)
                for r, j2 in enumerate(reversed(jitter))]
    samples.append(_sample("d-n_max4", 1.0, 0, depth=4096))  # a depth request: another question, left out
    table = sweep_table(samples, _arms(), "off", n_boot=500)
    assert table is not None and table.title == "n-max sweep" and table.keys == ["speculative.n_max"]
    off, one, four = table.rows
    assert off.is_baseline and off.vs_baseline is None and off.point == {"speculative.n_max": None}
    assert one.point == {"speculative.n_max": 1} and one.n == 6
    assert one.decode is not None and one.decode.estimate == pytest.approx(70.0)
    assert one.decode.lo < 70.0 < one.decode.hi  # an interval, not a bare median
    assert one.acceptance is not None and one.acceptance.acceptance == pytest.approx(0.9)
    assert one.acceptance.mean_accepted_len == pytest.approx(1.9)
    assert one.vs_baseline is not None and one.vs_baseline.ratio.estimate == pytest.approx(1.4, rel=0.02)
    assert one.vs_baseline.verdict == "faster" and one.vs_baseline.ratio.lo > 1
    assert four.n == 6  # the depth request is not counted
    assert four.vs_baseline is not None and four.vs_baseline.verdict == "equivalent", four.vs_baseline
    assert four.acceptance is not None and four.acceptance.mean_accepted_len == pytest.approx(3.0)
    header, rows = point_rows(table)
    assert header == ["arm", "n_max", "median decode tok/s", "Acceptance", "mean acc. len", "vs baseline", "n"]
    assert rows[0][:2] == ["off", "–"] and rows[0][-2:] == ["baseline", "6"]
    assert rows[1][1] == "1" and rows[1][2].startswith("70.0 (") and rows[1][3] == "90.0% (162/180)"
    assert rows[1][5].startswith("1.4") and rows[1][5].endswith("faster")


def test_no_sweep_section_for_a_plain_run() -> None:
    arms = [Arm(name="a", engine="e", model="m"), Arm(name="b", engine="e", model="m")]
    assert sweep_table([_sample("a", 1.0, 0), _sample("b", 2.0, 0)], arms, "a") is None


def test_depth_rows_have_intervals_needles_and_a_verdict_at_the_same_depth() -> None:
    def s(arm: str, depth: int, ttft: float, prefill: float, tps: float, rep: int,
          found: bool | None = None) -> Sample:
        return Sample(arm=arm, engine="e", prompt="q", mode="greedy", rep=rep, depth=depth, ttft_s=ttft,
                      prefill_tps=prefill, decode_tps=tps, prompt_tokens=depth, needle_found=found)

    samples = [s("a", 2048, 2.0, 1000, 40, 0, True), s("a", 512, 0.5, 1020, 50, 0, False),
               s("a", 512, 0.7, 980, 52, 1, True),
               Sample(arm="a", engine="e", prompt="q", mode="greedy", rep=0, decode_tps=99),  # not a depth request
               s("b", 512, 0.5, 1000, 100, 0), s("b", 512, 0.5, 1000, 104, 1)]
    table = depth_table(samples, ["a", "b"], "a", n_boot=500)
    assert table is not None
    header, rows = point_rows(table)
    assert header == ["arm", "depth", "median decode tok/s", "vs baseline", "TTFT s", "prefill tok/s", "n",
                      "prompt tokens", "needle"]
    assert rows[0][:3] == ["a", "512", "51.0 (50.0–52.0)"] and rows[0][3:] == ["baseline", "0.600", "1000.0", "2",
                                                                                "512", "1/2"]
    assert rows[1][:3] == ["a", "2048", "40.0 (40.0–40.0)"] and rows[1][-1] == "1/1"
    b512 = table.rows[2]
    assert b512.point == {"depth": 512} and b512.vs_baseline is not None  # paired with a at depth 512 only
    assert b512.vs_baseline.ratio.estimate == pytest.approx(2.0)


def test_concurrency_rows_have_per_stream_and_aggregate_intervals() -> None:
    def s(level: int, batch: str, wall: float, tps: float, status: str = "ok") -> Sample:
        return Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0, concurrency=level, batch_id=batch,
                      batch_wall_s=wall, decode_tps=tps, completion_tokens=64, ttft_s=0.1,
                      status=status)  # type: ignore[arg-type]

    table = concurrency_table([s(1, "x", 2.0, 40), s(2, "y", 2.0, 30), s(2, "y", 2.0, 34),
                               s(2, "z", 4.0, 20, status="error")], ["a"], "a", n_boot=500)
    assert table is not None
    header, rows = point_rows(table)
    assert header[:5] == ["arm", "streams", "per-stream decode tok/s", "aggregate tok/s", "vs baseline"]
    assert rows[0] == ["a", "1", "40.0 (40.0–40.0)", "32.0 (32.0–32.0)", "baseline", "0.100", "1", "0"]
    assert rows[1][:4] == ["a", "2", "32.0 (30.0–34.0)", "64.0 (64.0–64.0)"]  # the failed batch gives no aggregate
    assert rows[1][-2:] == ["2", "1"]


def test_the_nmax_section_is_in_report_md_html_and_summary_json(make_run: Maker) -> None:
    draft = {"method": "draft", "draft_model": "d.gguf"}
    run = make_run({"off": 50.0, "draft-n_max1": 60.0, "draft-n_max2": 75.0}, passes=2, reps=2,
                   speculative={"draft-n_max1": {**draft, "n_max": 1}, "draft-n_max2": {**draft, "n_max": 2}},
                   swept={"draft-n_max1": {"speculative.n_max": 1}, "draft-n_max2": {"speculative.n_max": 2}},
                   acceptance={"draft-n_max1": 0.8, "draft-n_max2": 0.6})
    summary = summarize_run(run, n_boot=300)
    assert summary.schema_version == 2 and summary.sweep is not None
    assert [r.point for r in summary.sweep.rows] == [{"speculative.n_max": None}, {"speculative.n_max": 1},
                                                     {"speculative.n_max": 2}]
    two = summary.sweep.rows[2]
    assert two.vs_baseline is not None and two.vs_baseline.verdict == "faster"
    files = write_reports(run, summary, plots=False)
    md = files.markdown.read_text()
    assert "**n-max sweep**" in md and "| arm | n_max | median decode tok/s |" in md
    line = next(x for x in md.splitlines() if x.startswith("| draft-n_max2 | 2 |"))
    assert line.endswith("faster | 8 |") and "60.0%" in line
    html = files.html.read_text()
    assert "<h2>n-max sweep</h2>" in html and '<table id="sweep">' in html
    assert '<tr data-arm="draft-n_max2"><td>draft-n_max2</td><td>2</td>' in html
    js = json.loads(files.json.read_text())
    rows = js["sweep"]["rows"]
    assert rows[2]["point"] == {"speculative.n_max": 2} and rows[2]["vs_baseline"]["verdict"] == "faster"
    assert rows[2]["decode"]["lo"] <= rows[2]["decode"]["estimate"] <= rows[2]["decode"]["hi"]
    assert render_markdown(summary) == md and "n-max sweep" in render_html(summary, {})
    assert js["depth"] is None and js["concurrency"] is None


def _tree(path: Path) -> dict[str, tuple[bytes, int, int]]:
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_reading_a_report_changes_nothing_in_the_run_directory(make_run: Maker) -> None:
    run = make_run({"a": 50.0, "b": 60.0}, passes=2, reps=2)
    assert (run / "bakeoff.sqlite").exists()  # the index is read too
    before = _tree(run)
    summarize_run(run, n_boot=200)
    for args in (["--no-files"], ["--json", "--no-files"], ["--markdown", "--no-files"]):
        result = CliRunner().invoke(app, ["report", str(run), "--n-boot", "200", *args])
        assert result.exit_code == 0, result.output
    assert _tree(run) == before
    result = CliRunner().invoke(app, ["report", str(run), "--n-boot", "200"])
    assert result.exit_code == 0, result.output
    after = _tree(run)
    written = {k for k in after if after[k] != before.get(k)}
    assert written and all(k.startswith("report" + os.sep) for k in written)  # only the report files

