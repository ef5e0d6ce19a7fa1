"""The answer first (issue 32): the default terminal output is one verdict block that fits 80 columns, names each
arm against the baseline with its interval, the recommendation and each warning once, and shows no red where
nothing is worse than the baseline; --tables prints every table; an empty table is never printed."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.reports import print_run, print_summary, summarize_run
from bakeoff.core.reports.html import render_html
from bakeoff.core.reports.tables import footnotes
from bakeoff.core.reports.verdict import merge_warnings, print_verdict, verdict_of
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.results.store import RunDir

Maker = Callable[..., Path]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "reports"
runner = CliRunner()
RED = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:31|91)m")


def rendered(summary_path: Path, width: int = 80, colour: bool = False) -> str:
    out = Console(width=width, record=True, force_terminal=colour, color_system="standard" if colour else None,
                  file=io.StringIO())
    print_verdict(verdict_of(summarize_run(summary_path)), out)
    return out.export_text(styles=colour)


@pytest.mark.parametrize("run", ["llamacpp-run", "decision-map-run", "acceptance-run"])
def test_the_verdict_block_fits_80_columns_without_cutting_a_number(run: str) -> None:
    summary = summarize_run(FIXTURES / run)
    text = rendered(FIXTURES / run)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "…" not in text
    for a in summary.arms:  # every arm, its median with its interval whole on one line
        m = a.median
        assert m is not None
        assert any(line.startswith(a.arm) and f"{m.estimate:.1f} ({m.lo:.1f}–{m.hi:.1f})" in line
                   for line in lines), (a.arm, text)
    for c in summary.comparisons:
        if c.comparable and not c.comparable["ok"]:
            continue
        assert f"{c.ratio.ratio_text()} {c.verdict}" in text, text  # bounds rounded outward
    assert len(lines) < 40  # a verdict, not 84 lines of tables


def test_the_block_leads_with_the_recommendation_and_the_token_accounting() -> None:
    text = " ".join(rendered(FIXTURES / "llamacpp-run", width=200).split())
    assert "stats-real: each arm against spec-off" in text
    # 3 passes on a busy box: ngram mod 1.01x (0.92-1.48) and draft 0.57x (0.42-1.39) (bounds rounded outward) fit
    # a real gain, so the block says it cannot tell instead of "off" (issue 40: a recommendation only from decided
    # comparisons)
    assert ("recommendation code: no recommendation: inconclusive (ngram-mod 1.01× (0.92–1.48), draft "
            "0.57× (0.42–1.39): each interval fits both a gain beyond 3% and none); more passes or --until-ci "
            "would decide") in text
    assert "recommendation code: off" not in text
    assert "accounting one token per SSE event here" in text


def test_a_run_whose_spec_arm_wins_says_so_in_green_and_shows_no_red(make_run: Maker) -> None:
    path = make_run({"spec-off": 20.0, "ngram": 34.0}, speculative={"ngram": {"method": "ngram"}},
                    acceptance={"ngram": 0.8})
    text = rendered(path, colour=True)
    plain = rendered(path)
    assert re.search(r"1\.[67]\d× \(1\.\d\d–1\.\d\d\) faster +80%", plain), plain
    assert not RED.search(text), text


def test_a_slower_arm_is_red(make_run: Maker) -> None:
    path = make_run({"spec-off": 20.0, "draft": 8.0}, speculative={"draft": {"method": "draft"}})
    assert RED.search(rendered(path, colour=True))


def test_warnings_are_merged_and_counted_once() -> None:
    merged = merge_warnings(["a: keeps state", "b: keeps state", "a: keeps state", "1 pass: noise only",
                             "a-long: other"], ["a", "b", "a-long"])
    assert merged == ["a, b: keeps state", "1 pass: noise only", "a-long: other"]


def test_report_prints_the_verdict_by_default_and_every_table_with_tables_flag() -> None:
    run = str(FIXTURES / "llamacpp-run")
    short = runner.invoke(app, ["report", run, "--no-files"], env={"COLUMNS": "80"})
    assert short.exit_code == 0, short.output
    assert "token accounting and timing" not in short.output and "vs spec-off" in short.output
    # USER-3 #12: the suggested command stands on a line of its own, whole, ready to paste
    assert f"every table:\nbakeoff report {run} --tables\n" in short.output
    full = runner.invoke(app, ["report", run, "--no-files", "-v"], env={"COLUMNS": "80"})
    assert full.exit_code == 0 and "token accounting and timing" in full.output
    assert "Acceptance per speculative arm" in full.output


def test_an_empty_table_is_never_printed(make_run: Maker) -> None:
    """Arms that do not speculate give the decision map's categories no row: no header-only table."""
    path = make_run({"spec-off": 20.0, "twin": 20.0})
    out = Console(width=200, record=True, file=io.StringIO())
    print_summary(summarize_run(path), out)
    text = out.export_text()
    assert "decision map" not in text and "Acceptance per speculative arm" not in text
    assert "token accounting and timing" in text


def test_gates_a_tiny_model_fails_on_every_arm_leave_the_block_without_red(make_run: Maker) -> None:
    """The demo's case: SmolLM2 cannot multiply; the baseline reads 'baseline', not GATE FAILED in red."""
    path = make_run({"spec-off": 20.0, "ngram": 30.0}, speculative={"ngram": {"method": "ngram"}},
                    acceptance={"ngram": 0.7})
    run = RunDir(path)
    wrong = {"arithmetic": {"passed": False, "detail": "answered 12", "answer": "12"},
             "factual": {"passed": True, "detail": "ok", "answer": "Paris"}}
    for arm in ("spec-off", "ngram"):
        run.append_attempt(arm, ArmAttempt.model_validate({"status": "ok", "pass": 0, "gates": wrong}))
    text = rendered(path, colour=True)
    plain = " ".join(rendered(path).split())
    assert not RED.search(text), text
    assert "GATE FAILED" not in plain
    assert "note gate arithmetic: not informative for this model (the baseline fails it too" in plain


def test_the_readme_sample_is_what_bakeoff_report_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README shows a verdict block; it must stay exactly what the command it names prints at 80 columns."""
    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    out = Console(width=80, record=True, file=io.StringIO())
    print_run(Path("evidence/examples/decision-map-cpu/run"), out, write=False)
    printed = "\n".join(line.rstrip() for line in out.export_text().splitlines())
    assert printed in (root / "README.md").read_text()


def test_an_undecided_arm_says_what_would_decide_it(make_run: Maker) -> None:
    """An A/A pair with 8 % noise over 3 passes: the interval cannot tell, so the line says how many passes
    at this spread would decide it; an identical, quiet pair is equivalent within ±3 %."""
    noisy = rendered(make_run({"spec-off": 20.0, "other": 20.0}, noise=0.08), width=120)
    line = next(x for x in noisy.splitlines() if x.lstrip().startswith("other"))
    assert re.search(r"not separable \(~\d+ passes would decide\)", line), line
    quiet = rendered(make_run({"spec-off": 20.0, "twin": 20.0}, noise=0.005), width=120)
    line = next(x for x in quiet.splitlines() if x.lstrip().startswith("twin"))
    assert "equivalent" in line and "would decide" not in line, line


EXAMPLE = Path(__file__).resolve().parents[3] / "evidence" / "examples" / "decision-map-cpu" / "run"


def test_the_block_says_the_ratio_is_paired_where_it_differs_from_the_ratio_of_the_medians() -> None:
    """USER-3 #10: ngram-n_max4 at 13.9 against spec-off's 14.6 read 1.06×; the block says why, on that row."""
    s = summarize_run(EXAMPLE)
    base = s.arm("spec-off")
    four, c = s.arm("ngram-n_max4"), s.comparison("ngram-n_max4")
    assert base and base.median and four and four.median and c
    assert round(four.median.estimate / base.median.estimate, 2) != round(c.ratio.estimate, 2)  # the case itself
    lines = [line.rstrip() for line in rendered(EXAMPLE).splitlines()]
    assert "ratio          median of paired per-request ratios, not of the medians above" in lines, lines
    page = render_html(s, {})
    assert 'id="ratio-note"' in page and "median of paired per-request ratios" in page


def test_the_design_line_names_every_factor_of_each_arms_sample_count() -> None:
    """USER-3 #4: the header said '1 pass(es) × 2 rep(s) × 2 prompt(s)' (4 per arm) above '56 sample(s) flagged'
    for one arm: the run's 2 depths and 7 streams (1+2+4) went unnamed. It names them now, as check does."""
    s = summarize_run(EXAMPLE)
    design = verdict_of(s).design
    said = re.match(r"(\d+) pass\(es\) × (.+), 128 output tokens", design)
    assert said and said.group(2) == "2 depth(s) × 7 stream(s) (1+2+4) × 2 prompt(s) × 1 mode(s) × 2 rep(s)", design
    product = int(said.group(1)) * math.prod(int(n) for n in re.findall(r"(\d+) [a-z]+\(s\)", said.group(2)))
    assert {a.n + a.errors for a in s.arms} == {product} == {56}
    assert said.group(2) in " ".join(footnotes(s))
    # a run that sweeps neither keeps the short line: reps × prompts is its count
    plain = verdict_of(summarize_run(FIXTURES / "llamacpp-run")).design
    assert "stream(s)" not in plain and "depth(s)" not in plain and " rep(s) × " in plain


def test_no_ratio_note_where_paired_and_medians_agree(make_run: Maker) -> None:
    path = make_run({"spec-off": 20.0, "ngram": 30.0}, speculative={"ngram": {"method": "ngram"}}, noise=0.001)
    assert verdict_of(summarize_run(path)).ratio_note is None
    assert "per-request ratios" not in rendered(path)


def test_the_recommendation_names_the_arms_as_the_table_does() -> None:
    """USER-3 #10: the table said ngram-n_max2 and the recommendation 'ngram mod n-max 2'."""
    s = summarize_run(EXAMPLE)
    v = verdict_of(s)
    table = {r.arm for r in v.rows}
    recs = [r for r in s.recommendations if r.depth is None and r.streams is None]
    assert recs and all(r.line in v.recommendation for r in recs)
    for r in recs:
        assert r.arm in table and r.line.startswith(f"{r.use_case}: {r.arm}, "), r.line
        for cell in r.cells:
            if cell.role:  # best, plateau or loses: each named in the line by its arm name
                assert cell.arm in table and cell.arm in r.line, (cell.arm, r.line)
            assert cell.setting == cell.arm or cell.setting not in r.line, (cell.setting, r.line)


def test_a_flagged_arm_s_warning_points_at_the_flag_glossary() -> None:
    v = verdict_of(summarize_run(EXAMPLE))
    flagged = [w for w in v.warnings if "sample(s) flagged" in w]
    assert flagged and all("docs/flags.md" in w for w in flagged), flagged
    assert (Path(__file__).resolve().parents[3] / "docs" / "flags.md").is_file()


def test_the_block_is_the_same_text_whatever_the_string_hashing() -> None:
    # flag kinds counted from sets: with tied counts their order followed PYTHONHASHSEED, so the same run's
    # warnings grouped its arms differently from one process to the next (and a test counting lines flaked)
    import os
    import subprocess
    import sys
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from test_verdict import rendered, FIXTURES; "
            "print(rendered(FIXTURES / 'decision-map-run'))")
    texts = {subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}, check=True, timeout=120).stdout
             for seed in ("1", "2", "3", "4")}
    assert len(texts) == 1
