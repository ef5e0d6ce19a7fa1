"""core/reports/capacity.py per workload kind: a row per arm and kind within 80 columns, a kind column only where
the search was not of plain prompts alone, the markdown table's columns aligned, and merge keeping the kinds."""

from __future__ import annotations

from bakeoff.core.analysis.capacity import CapacityResult, Kind, Probe, analyze_capacity
from bakeoff.core.config.capacity import CapacitySection
from bakeoff.core.reports.capacity import capacity_lines, capacity_markdown, capacity_rows, merge_capacity

LABEL = "TTFT p90 ≤ 200 ms"
LONG = "dflash-n-max-7-on-the-synthesized-3b"
CAPACITY = {("base", "plain"): 12, ("base", "structured"): 6, (LONG, "plain"): 20, (LONG, "structured"): 9}
SECTION = CapacitySection.model_validate({"constraints": [{"metric": "ttft_s", "percentile": 90, "max_s": 0.2}],
                                          "start": 1, "max": 64, "replicates": 2})


def result(kinds: tuple[Kind, ...] = ("plain", "structured")) -> CapacityResult:
    """Every probe at a load holds below its arm and kind's planted capacity and fails above it (no search needed
    to test the rendering: two loads bracket each capacity)."""
    probes = []
    for rnd, kind in enumerate(kinds):
        for (arm, k), cap in CAPACITY.items():
            if k != kind:
                continue
            for level in (cap, cap + 1):
                value = 0.1 if level <= cap else 0.5
                probes += [Probe(arm=arm, level=level, replicate=r, round=rnd, values={LABEL: [value] * level},
                                 kind=kind) for r in range(2)]
    return analyze_capacity(probes, SECTION, ["base", LONG], "base", n_boot=50)


def test_kinds_get_a_row_each_within_80_columns() -> None:
    lines = capacity_lines(result())
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[2].split()[:2] == ["arm", "kind"]
    table = [line.split()[1:3] for line in lines[3:7]]
    assert table == [["plain", "12"], ["structured", "6"], ["plain", "20"], ["structured", "9"]]
    assert "the structured streams" in " ".join(lines)  # wrapped, a long arm name leads the line


def test_plain_alone_reads_as_before_and_structured_alone_names_its_kind() -> None:
    plain = capacity_lines(result(("plain",)))
    assert plain[2].split()[:2] == ["arm", "boundary"] and not any("plain" in line for line in plain)
    structured = capacity_lines(result(("structured",)))
    assert structured[2].split()[:2] == ["arm", "kind"] and "the structured streams" in " ".join(structured)


def test_markdown_columns_line_up_and_rows_carry_the_kind() -> None:
    md = [line for line in capacity_markdown(result()) if line.startswith("|")]
    assert len({line.count("|") for line in md}) == 1, md
    assert md[0].startswith("| arm | kind |") and md[3].startswith("| base | structured | 6 (")
    rows = capacity_rows(result(), "run")
    assert [(r["arm"], r["kind"]) for r in rows if "ratio" in r] == [(LONG, "plain"), (LONG, "structured")]


def test_merge_keeps_every_bundles_kinds() -> None:
    merged = merge_capacity([("a", result(("plain",))), ("b", result())])
    assert merged is not None and merged.kinds == ["plain", "structured"]
    assert [(x.arm, x.kind) for x in merged.arms][:3] == [("base@a", "plain"), (f"{LONG}@a", "plain"),
                                                         ("base@b", "plain")]
