"""`bakeoff export` (core/reports/export.py): one flat row per sample with the arm's settings as columns, the
per-point table with the report's own numbers, and the community row; each format loads in pandas."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from sharing_runs import shared_run
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.schema import Settings
from bakeoff.core.reports.export import export_run
from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.flags import FLAGS, FOREIGN_LOAD, flag_name
from bakeoff.core.results.store import RunDir


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path: Path = shared_run(tmp_path / "run", {"off": 50.0, "ngram": 65.0}, passes=2, reps=2,
                      speculative={"ngram": {"method": "ngram", "n_max": 4}}, acceptance={"ngram": 0.6})
    record = RunDir.open(path).read_record()
    assert record.config is not None
    record.config.arms[0].settings = Settings(threads=2)
    RunDir(path).write_record(record)
    return path


def _load(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    return pd.read_parquet(path)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_samples_and_points_load_in_pandas(run: Path, tmp_path: Path, fmt: str) -> None:
    samples_path, points_path = export_run(run, fmt, tmp_path / fmt)  # type: ignore[arg-type]
    samples, points = _load(samples_path), _load(points_path)
    assert len(samples) == 2 * 2 * 2 * 2
    assert {"arm", "prompt", "pass_index", "decode_tps", "arm.engine", "arm.speculative.method",
            "arm.speculative.n_max", "arm.settings.threads", "arm.fingerprint", "engine.version"} <= set(samples)
    ngram = samples[samples["arm"] == "ngram"]
    assert set(ngram["arm.speculative.method"]) == {"ngram"} and set(ngram["arm.speculative.n_max"]) == {4}
    assert set(samples[samples["arm"] == "off"]["arm.settings.threads"]) == {2}
    assert samples["arm.fingerprint"].str.len().eq(16).all()
    summary = summarize_run(run)
    overall = points[points["table"] == "overall"].set_index("arm")
    assert overall.loc["ngram", "decode_tps"] == pytest.approx(summary.arm("ngram").median.estimate)  # type: ignore[union-attr]
    comparison = summary.comparison("ngram")
    assert comparison is not None
    assert overall.loc["ngram", "vs_baseline"] == pytest.approx(comparison.ratio.estimate)
    assert overall.loc["ngram", "vs_baseline_lo"] == pytest.approx(comparison.ratio.lo)
    assert overall.loc["ngram", "verdict"] == comparison.verdict == "faster"
    assert overall.loc["ngram", "acceptance"] == pytest.approx(0.6)
    assert bool(overall.loc["off", "is_baseline"]) and pd.isna(overall.loc["off", "vs_baseline"])
    # the median a user recomputes from the sample rows is the report's
    assert ngram["decode_tps"].median() == pytest.approx(overall.loc["ngram", "decode_tps"])
    # no column hides behind a DataFrame attribute (df.flags is the frame's flags, df.mode a method)
    assert not set(samples) & set(dir(pd.DataFrame)), set(samples) & set(dir(pd.DataFrame))
    assert samples.decoding_mode.notna().all() and "sample_flags" in samples
    flags = samples["sample_flags"]
    if fmt == "csv":  # a CSV cell is text: the list as JSON text
        assert all(isinstance(json.loads(v), list) for v in flags)
    else:  # Parquet and JSON lines keep a list a list
        assert all(list(v) == [] or isinstance(v[0], str) for v in flags) and not isinstance(flags.iloc[0], str)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_each_flag_s_name_is_a_list_column_of_its_own(tmp_path: Path, fmt: str) -> None:
    """USER-3 #8: a flag is free text ('foreign-load: 1.16 cores used by other processes (limit 0.29)'), so
    filtering meant matching a prefix; sample_flag_names holds the names alone (docs/flags.md's), a list."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[3] / "evidence" / "examples" / "decision-map-cpu" / "run", run)
    samples_path, _ = export_run(run, fmt, tmp_path / fmt)  # type: ignore[arg-type]
    samples = _load(samples_path)
    names = samples["sample_flag_names"].map(list)
    assert (names == samples["sample_flags"].map(lambda flags: [flag_name(f) for f in flags])).all()
    foreign = samples[names.map(lambda n: FOREIGN_LOAD.name in n)]
    assert len(foreign) and all(any(f.startswith("foreign-load: ") for f in flags) for flags in foreign["sample_flags"])
    assert set(names.sum()) <= set(FLAGS)  # every name is one the glossary explains


def test_parquet_without_pyarrow_names_the_extra(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[analysis\]' in the bakeoff checkout"):
        export_run(run, "parquet", tmp_path / "p")


def test_community_row_and_command(run: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["export", str(run), "--format", "community", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    header, _, off, ngram = res.output.splitlines()[:4]
    assert header.startswith("| arm | Overall median | Overall mean | code_python | prose | Acceptance | vs baseline "
                             "| machine | engine | fingerprint |")
    assert ngram.startswith("| ngram | ") and "faster" in ngram and "| Test CPU | fake b1 | " in ngram
    assert "baseline" in off
    res = CliRunner().invoke(app, ["export", str(run), "--format", "xlsx"])
    assert res.exit_code == 2 and "csv, parquet, jsonl, community" in res.output
