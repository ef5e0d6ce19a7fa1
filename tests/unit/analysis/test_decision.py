"""The decision map's recommendation line per prompt category, on a run whose truth is known."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
from rich.console import Console

from bakeoff.core.analysis.decision import plateau_text, setting_label
from bakeoff.core.config.schema import Speculative
from bakeoff.core.reports import print_summary, render_html, render_markdown, summarize_run
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir

# decode tok/s per arm and prompt category: draft n-max 2 and 3 tie on code, n-max 4 is behind, prose loses
RATES = {"off": {"code": 100.0, "prose": 100.0}, "draft-n2": {"code": 140.0, "prose": 99.0},
         "draft-n3": {"code": 141.0, "prose": 90.0}, "draft-n4": {"code": 120.0, "prose": 80.0}}
PROMPTS = {"code_python": "code", "code_bash": "code", "prose": "prose"}


def _write(path: Path, truth: dict[str, dict[str, float]] = RATES, spread: float = 0.01) -> Path:
    rng = np.random.default_rng(3)
    run = RunDir(path)
    arms = [{"name": a, "engine": "llamacpp", "model": "m.gguf",
             "speculative": {"method": "none"} if a == "off" else {"method": "draft", "n_max": int(a[-1])}}
            for a in truth]
    run.write_record(RunRecord.model_validate({"tool": {"name": "bakeoff", "version": "0"},
                   "config": {"name": "map", "arms": arms, "workload": {"reps": 6, "passes": 2, "max_tokens": 64}},
                   "baseline": "off", "orders": [list(truth)] * 2, "seed": 0, "host": {},
                   "prompts": [{"name": p, "kind": k, "messages": []} for p, k in PROMPTS.items()],
                   "arm_records": {a: [{"status": "ok", "pass": 0}] for a in truth}}))
    for p in range(2):
        for rep in range(6):
            for prompt, kind in PROMPTS.items():
                for arm, rates in truth.items():
                    tps = rates[kind] * math.exp(rng.normal(0, spread))
                    run.append(Sample(arm=arm, engine="llamacpp", prompt=prompt, mode="greedy", rep=rep, pass_index=p,
                                      decode_tps=tps, completion_tokens=64, n_first=1, decode_s=63 / tps,
                                      usage_present=True))
    return path


def test_each_category_gets_its_best_setting_its_plateau_and_its_losses(tmp_path: Path) -> None:
    s = summarize_run(_write(tmp_path / "run"), n_boot=500)
    recs = {r.category: r for r in s.recommendations}
    assert set(recs) == {"code", "prose"} and recs["code"].prompts == ["code_python", "code_bash"]
    code = recs["code"]
    assert code.arm == "draft-n3" and code.setting == "draft n-max 3" and code.ratio is not None
    assert 1.38 < code.ratio.lo <= code.ratio.estimate <= code.ratio.hi < 1.44
    assert code.plateau == ["draft-n2"] and code.losses == []  # 140 vs 141 is not separable; 120 is
    assert code.line.startswith("code: draft-n3, 1.41× (")  # the arms' names, as the verdict table's (USER-3 #10)
    assert "plateau: draft-n3, draft-n2 not separable" in code.line
    prose = recs["prose"]
    assert prose.arm is None and prose.setting == "off" and set(prose.losses) == {"draft-n3", "draft-n4"}
    assert prose.line == ("prose: off (no setting is faster than off by more than 3%: draft-n2 within it); "
                          "slower: draft-n3, draft-n4")
    md = render_markdown(s)
    assert "**Recommendation per use case**" in md and f"- {code.line}" in md
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary(s, console)
    assert prose.line in console.export_text()
    page = render_html(s, {})
    assert '<li data-category="code" data-use-case="code">code: draft-n3, 1.41×' in page


def test_setting_labels() -> None:
    assert setting_label(Speculative(method="none")) == "off" and setting_label(None) == "off"
    assert setting_label(Speculative(method="mtp", n_max=3, p_min=0.75)) == "mtp n-max 3 p-min 0.75"
    assert setting_label(Speculative(method="ngram", variant="simple")) == "ngram simple"


def test_plateau_text_merges_settings_that_differ_in_one_number() -> None:
    assert plateau_text(["draft n-max 3", "draft n-max 2", "draft n-max 4"]) == "draft n-max 2, 3, 4"
    assert plateau_text(["mtp n-max 2 p-min 0.75", "mtp n-max 3 p-min 0.75", "ngram"]) == \
        "mtp n-max 2, 3 p-min 0.75; ngram"


# per-stream decode tok/s by streams: draft pays alone and loses at 4 streams (the batch is compute-bound)
def test_off_is_drawn_only_when_a_gain_beyond_the_margin_is_excluded(tmp_path: Path) -> None:
    # draft n-max 2 is spec-off's equal on both categories; n-max 3 loses prose
    even = {"off": {"code": 100.0, "prose": 100.0}, "draft-n2": {"code": 100.0, "prose": 100.0},
            "draft-n3": {"code": 100.0, "prose": 80.0}}
    # a busy machine: each request's rate off by ~40 %, so an interval fits a gain and a loss
    noisy = {r.category: r for r in summarize_run(_write(tmp_path / "noisy", even, spread=0.4), n_boot=500)
             .recommendations}
    code = noisy["code"]
    assert code.arm is None and code.setting == "inconclusive" and not code.decided
    assert code.line.startswith("code: no recommendation: inconclusive (") and "off (" not in code.line
    assert code.line.endswith("none); more passes or --until-ci would decide")
    assert "draft-n2" in code.line and all(c.ratio and c.ratio.hi > 1.03 for c in code.cells
                                            if f"{c.arm} " in code.line)
    # a quiet machine (1 % spread): the same truth decides "off", with the tie named as within the margin
    quiet = {r.category: r for r in summarize_run(_write(tmp_path / "quiet", even), n_boot=500).recommendations}
    assert quiet["code"].decided and quiet["code"].setting == "off"
    assert quiet["code"].line == ("code: off (no setting is faster than off by more than 3%: draft-n2, draft-n3 "
                                  "within it)")
    assert quiet["prose"].line == ("prose: off (no setting is faster than off by more than 3%: draft-n2 within "
                                   "it); slower: draft-n3")


STREAM_RATES = {"off": {1: 100.0, 4: 60.0}, "draft-n2": {1: 130.0, 4: 45.0}, "draft-n3": {1: 131.0, 4: 40.0}}


def _write_streams(path: Path, reps: int = 4, passes: int = 2) -> Path:
    rng = np.random.default_rng(5)
    run = RunDir(path)
    arms = [{"name": a, "engine": "llamacpp", "model": "m.gguf",
             "speculative": {"method": "none"} if a == "off" else {"method": "draft", "n_max": int(a[-1])}}
            for a in STREAM_RATES]
    run.write_record(RunRecord.model_validate({"tool": {"name": "bakeoff", "version": "0"},
                   "config": {"name": "map", "arms": arms,
                              "workload": {"reps": reps, "passes": passes, "max_tokens": 64,
                                           "concurrency": [1, 4]}},
                   "baseline": "off", "orders": [list(STREAM_RATES)] * passes, "seed": 0, "host": {},
                   "prompts": [{"name": "code_python", "kind": "code", "messages": []}],
                   "arm_records": {a: [{"status": "ok", "pass": 0}] for a in STREAM_RATES}}))
    for p in range(passes):
        for rep in range(reps):
            for streams in (1, 4):
                for arm, rates in STREAM_RATES.items():
                    for _ in range(streams):
                        tps = rates[streams] * math.exp(rng.normal(0, 0.01))
                        run.append(Sample(arm=arm, engine="llamacpp", prompt="code_python", mode="greedy", rep=rep,
                                          pass_index=p, concurrency=streams, batch_id=f"{arm}{p}{rep}{streams}",
                                          batch_wall_s=1.0, decode_tps=tps, completion_tokens=64, n_first=1,
                                          decode_s=63 / tps, usage_present=True))
    return path


def test_each_use_case_gets_its_own_verdict_and_the_map_shows_them_all(tmp_path: Path) -> None:
    s = summarize_run(_write_streams(tmp_path / "run"), n_boot=500)
    recs = {r.use_case: r for r in s.recommendations}
    # the category over every stream count first, then each stream count
    assert list(recs) == ["code, all points", "code, 1 stream", "code, 4 streams"]
    alone, four = recs["code, 1 stream"], recs["code, 4 streams"]
    pooled = recs["code, all points"]  # 4-stream requests outnumber the rest 4 to 1, and draft loses there
    assert {c.ratio.n for c in pooled.cells if c.ratio} == {2 * 4 * (1 + 4)} and pooled.arm is None
    assert alone.arm == "draft-n3" and alone.plateau == ["draft-n2"] and alone.streams == 1
    assert alone.line.startswith("code, 1 stream: draft-n3, 1.31× (")
    assert "plateau: draft-n3, draft-n2 not separable" in alone.line
    assert four.arm is None and set(four.losses) == {"draft-n2", "draft-n3"}
    assert four.line == "code, 4 streams: off (no setting is faster than off); slower: draft-n2, draft-n3"
    assert {c.arm: (c.role, c.verdict) for c in four.cells} == {"draft-n2": ("loses", "slower"),
                                                                 "draft-n3": ("loses", "slower")}
    # one decision-map table for the category: a row per setting, a column per number of streams
    md = render_markdown(s)
    table = md[md.index("**decision map: code**"):]
    assert "| setting | arm | vs baseline, all points | vs baseline, 1 stream | vs baseline, 4 streams |" in table
    n3 = next(line for line in table.splitlines() if "| draft-n3 |" in line)
    assert re.search(r"\| ★ 1\.31× \(1\.\d\d–1\.\d\d\) faster \| ✗ 0\.67× \(0\.\d\d–0\.\d\d\) slower \|$", n3), n3
    n2 = next(line for line in table.splitlines() if "| draft-n2 |" in line)
    assert "≈ 1.30×" in n2 and "✗ 0.75×" in n2, n2
    page = render_html(s, {})
    assert '<table id="decision-map-code">' in page and '<td class="text slower">✗ 0.67×' in page
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary(s, console)
    text = console.export_text()
    assert "decision map: code" in text and four.line in text


def test_a_use_case_with_fewer_pairs_than_a_verdict_needs_gets_none(tmp_path: Path) -> None:
    run = _write_streams(tmp_path / "run", reps=1, passes=1)  # one request per arm alone, four at 4 streams
    s = summarize_run(run, n_boot=300)
    alone = next(r for r in s.recommendations if r.use_case == "code, 1 stream")
    assert alone.arm is None and alone.losses == [] and alone.plateau == []
    assert all(c.verdict is None and c.ratio is not None and c.ratio.n == 1 for c in alone.cells)
    assert alone.line == "code, 1 stream: no verdict (fewer than 6 paired requests per setting)"
    assert re.search(r"\| 1\.3\d× \(n=1, too few for a verdict\) \|", render_markdown(s))


def test_an_arm_that_drafted_nothing_is_left_out_and_the_line_says_why(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    arms = [{"name": "off", "engine": "llamacpp", "model": "m.gguf", "speculative": {"method": "none"}},
            *({"name": f"ngram-n{n}", "engine": "llamacpp", "model": "m.gguf",
               "speculative": {"method": "ngram", "variant": "simple", "n_max": n}} for n in (2, 4))]
    run.write_record(RunRecord.model_validate({"tool": {"name": "bakeoff", "version": "0"},
                   "config": {"name": "map", "arms": arms, "workload": {"reps": 4, "passes": 1, "max_tokens": 64}},
                   "baseline": "off", "orders": [["off", "ngram-n2", "ngram-n4"]], "seed": 0, "host": {},
                   "prompts": [{"name": "code_python", "kind": "code", "messages": []}],
                   "arm_records": {a["name"]: [{"status": "ok", "pass": 0}] for a in arms}}))
    for rep in range(4):
        for arm in ("off", "ngram-n2", "ngram-n4"):
            zero = None if arm == "off" else 0  # the n-gram arms report their counts: nothing drafted
            run.append(Sample(arm=arm, engine="llamacpp", prompt="code_python", mode="greedy", rep=rep, pass_index=0,
                              decode_tps=100.0 + rep, completion_tokens=64, n_first=1, decode_s=0.63,
                              usage_present=True, drafted=zero, accepted=zero, drafts=zero))
    [rec] = summarize_run(tmp_path / "run", n_boot=200).recommendations
    assert rec.cells == [] and rec.arm is None
    assert rec.excluded == ["ngram-n2, ngram-n4 (speculation asked but nothing drafted)"], rec.excluded
    assert rec.line == ("code: off (no speculating setting could be compared); left out: ngram-n2, ngram-n4 "
                        "(speculation asked but nothing drafted)"), rec.line
