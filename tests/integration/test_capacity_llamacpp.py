"""``bakeoff capacity`` against real llama-servers on the CPU (examples/capacity-cpu.yaml): the same SmolLM2 server
with 2 slots and with 4, searched from 1 to 8 streams at TTFT p90 ≤ 1.5 s and TPOT p90 ≤ 2 s. Both boundaries are found
(neither censored), the binding constraint is named, every probe's requests were measured, and the result is in
capacity.json and the report's summary.json."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "capacity-cpu.yaml"


def test_capacity_search_on_llamacpp(llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    out = tmp_path / "runs"
    proc = subprocess.run([bakeoff_cli, "capacity", str(EXAMPLE), "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    cap = json.loads((run / "capacity.json").read_text())
    arms = {a["arm"]: a for a in cap["arms"]}
    assert set(arms) == {"2-slots", "4-slots"}
    probes = "\n".join(line for line in proc.stdout.splitlines() if "(replicate" in line or "flagged" in line)
    for a in arms.values():
        assert a["censored"] is None and a["held"] is not None and a["failed"] is not None, f"{a}\n{probes}"
        assert a["binding"] in cap["constraints"]
        assert a["probes"] >= 2 * 2  # a bracket: at least two loads, two replicates each
    (cmp,) = cap["comparisons"]
    assert cmp["ratio"] is not None and cmp["text"].startswith("4-slots carries ")
    assert "Capacity at TTFT p90 ≤ 1.5 s and TPOT p90 ≤ 2 s" in proc.stdout
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["capacity"]["arms"][0]["binding"] == arms["2-slots"]["binding"]
