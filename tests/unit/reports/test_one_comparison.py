"""One comparison per pair: every table, section and format that compares the same requests of an arm with the
baseline shows the same interval and verdict (issue 27). On the committed decision-map run, the main table once
read ``ngram-n_max8 1.109× (0.999–1.307) not separable`` and the n-max table ``1.109× (1.016–1.296) faster``,
from the same 56 samples: two bootstraps, two seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bakeoff.core.reports import summarize_run, write_reports

REPO = Path(__file__).resolve().parents[3]
RUN = REPO / "evidence" / "examples" / "decision-map-cpu" / "run"
RATIO = re.compile(r"(\d+\.\d{3})× \((\d+\.\d{3})–(\d+\.\d{3})\) (faster|slower|not separable)")


def test_the_main_table_and_the_n_max_table_agree_on_every_pair(tmp_path: Path) -> None:
    files = write_reports(RUN, out=tmp_path, plots=False)
    summary = json.loads(files.json.read_text())
    main = {c["arm"]: c for c in summary["comparisons"]}
    rows = [r for r in summary["sweep"]["rows"] if r.get("vs_baseline")]
    assert rows, "the committed run has an n-max sweep"
    for row in rows:
        c, r = main[row["arm"]], row["vs_baseline"]
        assert row["n"] == c["ratio"]["n"], row["arm"]  # the same requests ...
        assert (r["ratio"], r["verdict"]) == (c["ratio"], c["verdict"]), row["arm"]  # ... the same answer
    shown = {arm: f"{c['ratio']['estimate']:.3f}× ({c['ratio']['lo']:.3f}–{c['ratio']['hi']:.3f}) {c['verdict']}"
             for arm, c in main.items()}
    markdown = files.markdown.read_text()
    top = markdown[:markdown.index("**depth sweep**")]  # the main table and the n-max table
    for row in rows:
        lines = [line for line in top.splitlines() if line.startswith(f"| {row['arm']} |")]
        assert len(lines) == 2 and all(shown[row["arm"]] in line for line in lines), (shown[row["arm"]], lines)
        assert len([m for line in lines for m in RATIO.finditer(line)]) == 2  # no second interval beside it
        assert files.html.read_text().count(shown[row["arm"]]) >= 2, row["arm"]  # main and n-max tables


def test_the_same_pairs_give_the_same_interval_in_any_order() -> None:
    first = summarize_run(RUN)
    again = summarize_run(RUN)
    assert [c.ratio for c in first.comparisons] == [c.ratio for c in again.comparisons]
    assert [r.line for r in first.recommendations] == [r.line for r in again.recommendations]
