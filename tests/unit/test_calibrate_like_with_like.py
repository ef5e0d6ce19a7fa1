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
