"""`bakeoff merge` (core/reports/merge.py): bundles from several machines in one report; the same
fingerprint on other hardware is compared as hardware, unpaired and labelled, never as an arm effect; duplicate
samples are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sharing_runs import H200_RIG, canonical, shared_run
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import BundleError
from bakeoff.core.reports import render_html
from bakeoff.core.reports.merge import merge_bundles, render_merge_markdown
from bakeoff.core.results.bundle import bundle_run
from bakeoff.core.results.record import parse_run_record
from bakeoff.core.results.store import RunDir


def _bundle(tmp_path: Path, name: str, arms: dict[str, float], **kw: Any) -> Path:
    run = shared_run(tmp_path / name, arms, passes=3, reps=3, **kw)
    return bundle_run(run, tmp_path / f"{name}.tar.gz")[0]


@pytest.fixture
def two_machines(tmp_path: Path) -> tuple[Path, Path]:
    configs = {"ngram": canonical(method="ngram")}
    cpu = _bundle(tmp_path, "cpu", {"off": 50.0, "ngram": 60.0}, configs=configs, seed=1)
    gpu = _bundle(tmp_path, "gpu", {"off": 500.0, "ngram": 450.0}, rig=H200_RIG, configs=configs, seed=2)
    return cpu, gpu


def test_same_configuration_on_other_hardware_is_a_hardware_comparison(two_machines: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    merged = merge_bundles(list(two_machines), tmp_path / "m")
    s = merged.summary
    assert [b.label for b in merged.bundles] == ["Test", "NVIDIA-H200"]
    assert [a.arm for a in s.arms] == ["off@Test", "ngram@Test", "off@NVIDIA-H200", "ngram@NVIDIA-H200"]
    # each bundle's arms against their own baseline, paired, as in its own report
    pairs = {(c.arm, c.reference): c for c in s.comparisons}
    assert set(pairs) == {("ngram@Test", "off@Test"), ("ngram@NVIDIA-H200", "off@NVIDIA-H200")}
    assert all(c.paired for c in s.comparisons)
    assert pairs[("ngram@Test", "off@Test")].verdict == "faster"
    assert pairs[("ngram@NVIDIA-H200", "off@NVIDIA-H200")].verdict == "slower"
    # both arms have the same fingerprint on both machines: hardware, unpaired, labelled with what differs
    assert [(c.arm, c.reference) for c in s.hardware] == [("off@NVIDIA-H200", "off@Test"),
                                                          ("ngram@NVIDIA-H200", "ngram@Test")]
    hw, ngram = s.hardware
    assert not hw.paired and hw.verdict == "faster" and hw.ratio.estimate == pytest.approx(10.0, rel=0.05)
    assert ngram.ratio.estimate == pytest.approx(7.5, rel=0.05)
    assert "hardware differs: cpu_model: Test CPU → Xeon 8480" in hw.notes[0]
    text = render_merge_markdown(merged)
    assert "Same configuration on other hardware (unpaired)" in text and "| off@NVIDIA-H200 | off@Test |" in text
    assert "NVIDIA H200 (driver 580.1, 700 W of 700 W default, PCIe gen 5/5 x16/16)" in text
    assert "Same configuration on other hardware" in render_html(s, {})


def test_every_fingerprint_is_matched_and_different_ones_are_explained(tmp_path: Path) -> None:
    a = _bundle(tmp_path, "a", {"off": 50.0, "ngram": 60.0},
                configs={"ngram": canonical(method="ngram")}, seed=1)
    b = _bundle(tmp_path, "b", {"off": 55.0, "ngram": 70.0}, rig=H200_RIG,
                configs={"ngram": canonical(threads=8, method="ngram")}, seed=2)
    merged = merge_bundles([a, b], tmp_path / "m", labels=["laptop", "server"])
    assert [(c.arm, c.reference) for c in merged.summary.hardware] == [("off@server", "off@laptop")]
    [note] = merged.notes
    assert note.startswith("ngram@laptop and ngram@server: different configurations, not compared across bundles")
    assert "settings.threads: 2 → 8" in note


def test_the_same_run_twice_is_refused(two_machines: tuple[Path, Path], tmp_path: Path) -> None:
    cpu, _ = two_machines
    again = tmp_path / "again.tar.gz"
    shutil.copy(cpu, again)
    with pytest.raises(BundleError, match=r"again.tar.gz repeats 36 sample\(s\) of Test"):
        merge_bundles([cpu, again], tmp_path / "m")


def test_a_bundle_that_does_not_verify_is_refused(two_machines: tuple[Path, Path], tmp_path: Path) -> None:
    cpu, gpu = two_machines
    gpu.write_bytes(gpu.read_bytes()[:-40])
    with pytest.raises(BundleError, match="does not verify"):
        merge_bundles([cpu, gpu], tmp_path / "m")
    with pytest.raises(BundleError, match="at least two"):
        merge_bundles([cpu], tmp_path / "m")


def test_a_partial_bundle_is_said_partial_with_its_unmeasured_arm_and_the_design_line_never_reads_none(
        tmp_path: Path) -> None:
    part = shared_run(tmp_path / "part", {"off": 50.0, "ngram": 60.0}, passes=2, reps=3, seed=1)
    samples = part / "samples.jsonl"
    kept = [line for line in samples.read_text().splitlines(keepends=True)
            if json.loads(line)["arm"] == "off" and json.loads(line)["pass_index"] == 0]
    samples.write_text("".join(kept))  # stopped by SIGTERM in pass 1, before arm ngram
    record = RunDir.open(part).read_record().to_json()
    record["arm_records"] = {"off": record["arm_records"]["off"][:1]}
    record["stopped"] = {"at": 1.0, "why": "signal", "detail": "SIGTERM"}
    RunDir.open(part).write_record(parse_run_record(record, "run.json"))
    full = bundle_run(shared_run(tmp_path / "full", {"off": 55.0, "ngram": 70.0}, passes=2, reps=2, seed=2),
                      tmp_path / "full.tar.gz")[0]
    merged = merge_bundles([bundle_run(part, tmp_path / "part.tar.gz")[0], full], tmp_path / "m",
                           labels=["part", "full"])
    assert not merged.summary.complete
    assert [b.incomplete for b in merged.bundles] == ["0 of 2 passes complete (6 of 24 samples)", None]
    lead = merged.notes[0]
    assert lead.startswith("part: INCOMPLETE RUN: 0 of 2 passes complete (6 of 24 samples); stopped in pass 1")
    assert lead.endswith("no sample of ngram@part, so it is in no table") and merged.summary.warnings[0] == lead
    assert not any("--resume" in w for w in merged.summary.warnings)  # no resume into the merge's copy
    text = render_merge_markdown(merged)
    assert "6 (INCOMPLETE: 0 of 2 passes complete (6 of 24 samples))" in text
    assert "None" not in text and "× rep(s) differing by bundle ×" in text
    assert "vs baseline (off@full):" in text  # the only ratios are the full bundle's, against its own baseline


def test_the_footnote_names_each_bundles_baseline_when_rows_are_against_several(two_machines: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    text = render_merge_markdown(merge_bundles(list(two_machines), tmp_path / "m"))
    assert "vs baseline (each row against its own run's baseline: off@Test, off@NVIDIA-H200):" in text


@pytest.mark.parametrize("label", ["../../escaped", "a/b", "..", ".hidden", ""])
def test_a_label_that_is_not_one_plain_name_is_refused_before_anything_is_unpacked(
        two_machines: tuple[Path, Path], tmp_path: Path, label: str) -> None:
    work = tmp_path / "out" / "bundles"
    with pytest.raises(BundleError, match=r"--label .*a label names the directory a bundle unpacks into"):
        merge_bundles(list(two_machines), work, labels=[label, "b"])
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out").exists()


def test_merge_command(two_machines: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    res = CliRunner().invoke(app, ["merge", *map(str, two_machines), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "merged bundles (2)" in res.output and "Same configuration on other hardware" in res.output
    data = json.loads((out / "summary.json").read_text())
    assert data["kind"] == "bakeoff-merge" and len(data["bundles"]) == 2
    assert data["summary"]["hardware"][0]["paired"] is False
    assert (out / "report.md").read_text().startswith("## Merged: 2 bundles")
    assert (out / "bundles" / "Test" / "samples.jsonl").exists()
