"""reports/compare.py and `bakeoff compare`: runs made at different times, resampled independently."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.reports.compare import compare_runs, render_comparison_markdown

Maker = Callable[..., Path]


def test_a_change_in_one_arm_is_found(make_run: Maker) -> None:
    a = make_run({"base": 100.0, "ngram": 120.0}, seed=1)
    b = make_run({"base": 100.0, "ngram": 150.0, "new": 10.0}, seed=2)
    c = compare_runs(a, b)
    by_arm = {ch.arm_a: ch for ch in c.arms}
    assert by_arm["base"].change.verdict == "equivalent"  # unchanged, and the interval shows it within ±3 %
    assert by_arm["ngram"].change.verdict == "faster" and by_arm["ngram"].change.ratio.estimate == pytest.approx(
        1.25, rel=0.03)
    assert not by_arm["ngram"].change.paired and c.unmatched_b == ["new"]
    assert by_arm["ngram"].speedup_a == pytest.approx(1.2, rel=0.03) and by_arm["base"].speedup_a == 1.0
    assert "| ngram | " in render_comparison_markdown(c)
    assert c.differences == []


def test_setup_differences_are_listed(make_run: Maker) -> None:
    a = make_run({"x": 100.0})
    b = make_run({"x": 100.0}, prompts=("code_python",))
    c = compare_runs(a, b)
    assert c.prompts == ["code_python"]
    assert c.differences == ["prompts: ['code_python', 'prose'] → ['code_python']"]
    assert "- differs: prompts" in render_comparison_markdown(c)


def test_renamed_arms_need_a_mapping(make_run: Maker) -> None:
    a = make_run({"old-name": 100.0})
    b = make_run({"new-name": 90.0})
    with pytest.raises(ConfigError, match="--pair"):
        compare_runs(a, b)
    c = compare_runs(a, b, {"old-name": "new-name"})
    assert c.arms[0].change.verdict == "slower" and c.arms[0].arm_b == "new-name"
    with pytest.raises(ConfigError):
        compare_runs(a, b, {"old-name": "missing"})


def test_compare_command(make_run: Maker) -> None:
    a = make_run({"x": 100.0}, seed=1)
    b = make_run({"x": 120.0}, seed=2)
    runner = CliRunner()
    res = runner.invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 0, res.output
    assert "faster" in res.output and "B / A" in res.output
    res = runner.invoke(app, ["compare", str(a), str(b), "--json"])
    assert json.loads(res.output)["arms"][0]["change"]["verdict"] == "faster"
    res = runner.invoke(app, ["compare", str(a), str(b), "--pair", "nonsense"])
    assert res.exit_code == 2 and "A_ARM=B_ARM" in res.output
    res = runner.invoke(app, ["compare", str(a), str(a.parent / "nope")])
    assert res.exit_code == 2 and "not a bakeoff run directory" in res.output


def test_lengths_recorded_or_not_are_matched_through_the_workload(make_run: Maker) -> None:
    old = make_run({"x": 100.0})  # samples without max_tokens, workload max_tokens 128

    def recorded(path: Path, length: int) -> Path:
        lines = [json.loads(line) | {"max_tokens": length}
                 for line in (path / "samples.jsonl").read_text().splitlines()]
        (path / "samples.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
        meta = json.loads((path / "run.json").read_text())
        meta["config"]["workload"]["max_tokens"] = length
        (path / "run.json").write_text(json.dumps(meta))
        return path

    same = compare_runs(old, recorded(make_run({"x": 110.0}), 128))
    assert [ch.change.verdict for ch in same.arms] == ["faster"]
    other = compare_runs(old, recorded(make_run({"x": 110.0}), 64))
    assert other.arms == [] and "x: no prompt, mode and length measured by both runs" in other.differences
    assert "max_tokens: 128 → 64" in other.differences


def test_compare_says_whether_two_runs_are_comparable(tmp_path: Path) -> None:
    from sharing_runs import H200_RIG, canonical, shared_run

    a = shared_run(tmp_path / "a", {"off": 50.0, "ngram": 60.0}, configs={"ngram": canonical(method="ngram")})
    b = shared_run(tmp_path / "b", {"off": 50.0, "ngram": 61.0}, seed=3,
                   configs={"ngram": canonical(threads=8, method="ngram")})
    c = compare_runs(a, b)
    assert c.comparable[0].startswith("off: comparable: the same configuration (")
    assert c.comparable[1].startswith("ngram: not comparable as an arm effect: configuration differs (")
    assert c.comparable[1].endswith("settings.threads: 2 → 8")
    gpu = shared_run(tmp_path / "g", {"off": 500.0}, rig=H200_RIG)
    [line] = compare_runs(a, gpu).comparable
    assert "hardware differs: cpu_model: Test CPU → Xeon 8480; cpu_count: 2 → 16; gpus: none → ['NVIDIA H200']" in line
    assert "- off: comparable" in render_comparison_markdown(c)
