"""One self-contained HTML report: tables, verdicts, warnings and plots in a single file.

It opens with the answer: the verdict block (core/reports/verdict.py: each arm against the baseline, the
recommendation, the token accounting, the number of warnings), then the headline table, then everything else.

Nothing is fetched: styles are inline and plots are embedded as base64 SVG images (each SVG stays
isolated in its own ``<img>``, so two plots never share element ids). A two-line script records how
many plots decoded, which the headless-browser test reads back; the page renders the same without it.
"""

from __future__ import annotations

import base64
import html
import json

from .calibration import (
    break_even_rows,
    calibration_rows,
    heatmap_grids,
    timing_agreement_line,
    timing_agreement_rows,
)
from .completeness import passes_said
from .model import RunSummary
from .tables import (
    audit_table,
    community_table,
    correctness_table,
    footnotes,
    gpu_table,
    phase_rows,
    roofline_note,
    roofline_table,
    sections,
)
from .verdict import VerdictBlock, verdict_of

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1200px;color:#1b1b1b;
padding:0 1rem}
h1{font-size:1.4rem;margin-bottom:.2rem}h2{font-size:1.1rem;margin-top:2rem}
.meta{color:#555;font-size:.85rem}
table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}
th,td{border:1px solid #d0d0d0;padding:.3rem .55rem;text-align:right;white-space:nowrap}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left;font-weight:600}
td.text,th.text{text-align:left}.scroll{overflow-x:auto}
.faster{color:#116611;font-weight:600}.slower{color:#a01010;font-weight:600}.not-separable{color:#8a6d00}.too-few-pairs{color:#8a6d00}.equivalent{color:#0b5f73}
.not-comparable,.gate-failed{color:#a01010;font-weight:600}
#verdict{border:1px solid #d0d0d0;border-radius:6px;padding:.2rem 1rem .6rem;margin:1rem 0;background:#fafafa}
#verdict h2{margin-top:.6rem}#verdict p{margin:.35rem 0;font-size:.9rem}
.warn{background:#fff6d6;border-left:4px solid #e0b000;padding:.4rem .7rem;margin:.4rem 0;font-size:.85rem}
.fail{background:#fde2e2;border-left:4px solid #c00;padding:.4rem .7rem;margin:.4rem 0;font-size:.85rem}
ul.notes{font-size:.8rem;color:#444}figure{margin:1rem 0}img.plot{max-width:100%;height:auto;
border:1px solid #eee}
"""

_SCRIPT = ("window.addEventListener('load',function(){var n=0;for(var i of document.images){"
           "if(i.complete&&i.naturalWidth>0){n++;}}document.body.setAttribute('data-plots-loaded',String(n));});")


def _table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    text_cols = {i for i, h in enumerate(header) if h in ("Acceptance", "tok/J vs baseline")
                 or h.startswith("vs baseline")}
    out = [f'<div class="scroll"><table id="{table_id}"><thead><tr>'
           + "".join(f'<th class="text">{html.escape(h)}</th>' if i in text_cols else f"<th>{html.escape(h)}</th>"
                     for i, h in enumerate(header)) + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cls = []
            if i in text_cols:
                cls.append("text")
            for v in ("faster", "slower", "equivalent", "not separable", "too few pairs"):
                if (header[i] == "tok/J vs baseline" or header[i].startswith("vs baseline")) and c.endswith(v):
                    cls.append(v.replace(" ", "-"))
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{html.escape(c)}</td>")
        out.append(f'<tr data-arm="{html.escape(row[0])}">' + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _calibration_html(s: RunSummary) -> list[str]:
    c = s.calibration
    if c is None:
        return []
    parts = ["<h2>Calibration (forced acceptance)</h2>"]
    for name, (accs, ns, grid) in heatmap_grids(c).items():
        rows = [[f"{a:.2f}", *("–" if v is None else f"{v:.2f}×" for v in row)]
                for a, row in zip(accs, grid, strict=True)]
        slug = name.replace(" ", "-")
        parts += [f"<h3>{html.escape(name)}: speedup by acceptance and n_max</h3>",
                  _table(["acceptance", *(f"n_max {n}" for n in ns)], rows, f"calibration-grid-{slug}")]
    parts += ["<h3>Break-even acceptance</h3>", _table(*break_even_rows(c), "calibration-break-even")]
    if (agreement := timing_agreement_line(c)) is not None:
        parts += ["<h3>Timing agreement</h3>", f'<p id="calibration-agreement">{html.escape(agreement)}</p>',
                  _table(*timing_agreement_rows(c), "calibration-agreement-points")]
    parts += ["<h3>Calibration points</h3>", _table(*calibration_rows(c), "calibration-points")]
    parts += [f'<div class="warn">⚠ {html.escape(f)}</div>' for f in c.flags]
    return parts


def _verdict_html(v: VerdictBlock, s: RunSummary) -> list[str]:
    """The answer first: each arm against the baseline, the recommendation, the accounting, the warnings' count."""
    esc = html.escape
    rows = []
    for r in v.rows:
        cls = r.outcome.replace(" ", "-")
        rows.append(f'<tr data-arm="{esc(r.arm)}"><td>{esc(r.arm)}</td><td>{esc(r.decode)}</td>'
                    f'<td class="text {cls}">{esc(r.vs)}</td><td>{esc(r.acceptance)}</td></tr>')
    vs = f"vs {v.baseline}" if v.baseline else "vs baseline"
    head = f'<th>arm</th><th>decode tok/s</th><th class="text">{esc(vs)}</th><th>accepted</th>'
    parts = ['<section id="verdict">', f"<h2>{esc(v.title)}</h2>", f'<p class="meta">{esc(v.design)}</p>',
             f'<div class="scroll"><table id="verdict-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
             "</tbody></table></div>"]
    if v.ratio_note:
        parts.append(f'<p id="ratio-note"><b>Ratio</b>: {esc(v.ratio_note)}</p>')
    if v.recommendation:
        more = ' (<a href="#use-cases">every use case</a> below the table)' if len(s.recommendations) > len(
            v.recommendation) else ""
        parts += [f"<p><b>Recommendation</b>{more}</p>", '<ul id="recommendation">'
                  + "".join(f"<li>{esc(line)}</li>" for line in v.recommendation) + "</ul>"]
    if v.structured:
        parts += ['<p><b>Structured requests</b> (<a href="#structured">the table</a>)</p>',
                  '<ul id="structured-lines">' + "".join(f"<li>{esc(line)}</li>" for line in v.structured) + "</ul>"]
    if v.accounting:
        parts.append(f'<p id="accounting"><b>Token accounting</b>: {esc(v.accounting)}</p>')
    parts += [f'<p class="meta">{esc(n)}</p>' for n in v.notes]
    if v.warnings or v.failures:
        failed = f"{len(v.failures)} failure(s), " if v.failures else ""
        parts.append(f'<p><a href="#warnings">{failed}{len(v.warnings)} warning(s)</a> below.</p>')
    parts.append("</section>")
    return parts


def render_html(s: RunSummary, plots: dict[str, dict[str, bytes]]) -> str:
    """The report as one HTML document; ``plots`` as returned by ``plots.render_plots``."""
    esc = html.escape
    verdict = verdict_of(s)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>bakeoff · {esc(s.name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{esc(s.name)}</h1>",
             f'<p class="meta">run {esc(s.run_id)} · bakeoff {esc(str(s.tool.get("version", "")))} · baseline '
             f"<b>{esc(s.baseline or '')}</b> · {esc(passes_said(s.passes, s.progress))} · host "
             f"{esc(str(s.host.get('cpu_model') or s.host.get('platform') or '?'))}</p>",
             *([f'<div class="warn" id="incomplete">⚠ {esc(verdict.incomplete)}</div>'] if verdict.incomplete else []),
             *_verdict_html(verdict, s),
             "<h2>Decode rate (tok/s)</h2>", _table(*community_table(s), "community")]
    parts.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in footnotes(s)) + "</ul>")
    if s.recommendations:  # the answer per use case, right under the table it is drawn from
        parts += ['<h2 id="use-cases">Recommendation per use case</h2>', '<ul id="recommendations">'
                  + "".join(f'<li data-category="{esc(r.category)}" data-use-case="{esc(r.use_case)}">'
                            f"{esc(r.line)}</li>" for r in s.recommendations) + "</ul>"]
    for section in sections(s):
        parts += [f"<h2>{esc(section.title)}</h2>", _table(section.header, section.rows, section.id)]
        if section.note:
            parts.append(f'<ul class="notes"><li>{esc(section.note)}</li></ul>')
    parts.append('<div id="warnings"></div>')
    parts += [f'<div class="warn">⚠ {esc(w)}</div>' for w in verdict.warnings]
    parts += [f'<div class="fail">{esc(f)}</div>' for f in verdict.failures]

    if (correct := correctness_table(s)) is not None:
        parts += ["<h2>Correctness</h2>", _table(*correct, "correctness")]
    if s.phases:
        parts += ["<h2>Phases</h2>", _table(*phase_rows(s.phases), "phases")]
    if s.calibration is not None:
        parts += _calibration_html(s)
    if (roof := roofline_table(s)) is not None:
        parts += ["<h2>Roofline</h2>", _table(*roof, "roofline"), f'<ul class="notes"><li>{esc(roofline_note(s) or "")}'
                  "</li></ul>"]
    if (gpu := gpu_table(s)) is not None:
        parts += ["<h2>GPU telemetry</h2>", _table(*gpu, "gpu")]
    parts.append("<h2>Plots</h2>")
    for name, formats in plots.items():
        data = base64.b64encode(formats["svg"]).decode("ascii")
        parts.append(f'<figure><img class="plot" id="plot-{esc(name)}" alt="{esc(name.replace("_", " "))}" '
                     f'src="data:image/svg+xml;base64,{data}"></figure>')
    parts += ["<h2>Token accounting and timing</h2>", _table(*audit_table(s), "audit")]
    if s.orders:
        parts.append("<h2>Arm order per pass</h2><ol>" + "".join(f"<li>{esc(' → '.join(o))}</li>" for o in s.orders)
                     + "</ol>")
    parts.append("<details><summary>summary.json</summary><pre>"
                 + esc(json.dumps(s.model_dump(mode="json"), indent=1)) + "</pre></details>")
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts)
