"""Issue 33 item 5: calibration's client and engine speedups compare the same request pairs, and a point that
lost a pair says so (a spec-off sample flagged burst-delivery had left only the client's pairs)."""

from __future__ import annotations

import json
from pathlib import Path

from test_calibrate import _write_calibration_run

from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.store import RunDir


def test_a_flagged_spec_off_sample_leaves_both_speedups_and_flags_the_point(tmp_path: Path) -> None:
    path = _write_calibration_run(tmp_path / "run")
    run = RunDir(path, create=False)
    lines = run.samples_path.read_text().splitlines()
    first = json.loads(lines[0])  # spec-off, rep 0: its engine rate made 5x slower, its client rate flagged away
    first["flags"] = ["burst-delivery: 90 % of events in one read"]
    first["server_decode_tps"] = first["server_decode_tps"] / 5
    run.samples_path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    (path / "bakeoff.sqlite").unlink()  # the index is rebuilt from samples.jsonl
    c = summarize_run(path).calibration
    assert c is not None
    for p in c.points:
        assert p.engine_speedup is not None and p.speedup is not None
        assert abs(p.speedup / p.engine_speedup - 1) < 0.05, (p.n_max, p.target_acceptance, p.speedup,
                                                             p.engine_speedup)
        assert any(f.startswith("lost 1 request pair(s) from both speedups (burst-delivery") for f in p.flags), p.flags


def test_a_point_whose_spec_off_pair_was_flagged_says_so(tmp_path: Path) -> None:
    from bakeoff.core.reports.calibration import calibration_rows

    path = _write_calibration_run(tmp_path / "run")
    run = RunDir(path, create=False)
    lines = [json.loads(x) for x in run.samples_path.read_text().splitlines()]
    spec_off = [x for x in lines if x["arm"] == lines[0]["arm"]]  # the first arm is the calibration's spec-off
    spec_off[0]["flags"] = ["foreign-load: 1.4 cores busy elsewhere"]
    spec_off[1]["flags"] = ["harness-lag: 3 % of the decode window", "foreign-load: 1.1 cores"]
    run.samples_path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path / "bakeoff.sqlite").unlink()
    c = summarize_run(path).calibration
    assert c is not None and c.points
    for p in c.points:  # every point pairs with those spec-off requests; each still has its speedup
        assert "spec-off pair flagged: foreign-load ×2, harness-lag ×1" in p.flags, p.flags
        assert p.speedup is not None
    _, rows = calibration_rows(c)
    assert all("spec-off pair flagged: foreign-load ×2" in row[-1] for row in rows)


def test_a_point_with_clean_spec_off_pairs_carries_no_such_flag(tmp_path: Path) -> None:
    c = summarize_run(_write_calibration_run(tmp_path / "run")).calibration
    assert c is not None and c.points
    assert not any("spec-off pair flagged" in f for p in c.points for f in p.flags)
