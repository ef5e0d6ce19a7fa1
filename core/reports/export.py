"""Flat exports of a run for pandas, spreadsheets and community tables (``bakeoff export RUN``).

Two tables, written as CSV, JSON lines or Parquet:

- **samples**: one row per timed request, every Sample field (mappings as JSON text; lists as lists in Parquet and
  JSON lines, JSON text in CSV; GPU telemetry as ``gpu.*`` columns; ``flags`` and ``mode`` as ``sample_flags`` and
  ``decoding_mode``, since ``df.flags`` and ``df.mode`` are DataFrame attributes; ``sample_flag_names`` the flags'
  names alone, docs/flags.md's, to filter on), and beside them the arm's
  settings as columns (``arm.engine``, ``arm.speculative.n_max``, ``arm.settings.threads``, ``arm.options.*``: the
  configuration run.json recorded, secrets masked), its configuration fingerprint and the engine version it
  reported;
- **points**: one row per arm and measured point (``table``: overall, sweep, depth or concurrency; the point's
  values as ``point.*`` columns): the median decode rate with its interval, the paired ratio against the
  baseline with its interval and verdict, acceptance, TTFT, aggregate tok/s, from the same run summary every
  report is drawn from, so the numbers are the report's; load points (``table: load``) add p50/p90/p95/p99 of
  TTFT, ITL, TPOT and end-to-end time with intervals, goodput per SLO tier and per-user/aggregate tok/s.

And **community**: the community table the reports print (arm, overall median, mean, a column per prompt,
acceptance, vs baseline) with the machine, the engine build and the fingerprint added to each row, as
markdown to paste.

CSV and JSON lines need nothing beyond bakeoff; Parquet needs pyarrow (``pip install -e '.[analysis]'`` in a
checkout: pyarrow and pandas).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from ..analysis.load import LoadPoint
from ..common.errors import ConfigError, MeasurementError
from ..config.schema import Arm
from ..results.flags import flag_name
from ..results.sample import Sample
from .capacity import capacity_rows
from .markdown import markdown_table
from .model import RunSummary, load_run, summarize_run
from .points import PointRow
from .tables import community_table

__all__ = ["FORMATS", "Format", "community_rows", "export_run", "point_rows", "sample_rows", "write_table"]

Format = Literal["csv", "parquet", "jsonl", "community"]
FORMATS: tuple[str, ...] = ("csv", "parquet", "jsonl", "community")
Row = dict[str, Any]
# Sample fields named like a pandas DataFrame attribute: ``df.flags`` would read the frame's flags, not the column
EXPORT_NAMES = {"flags": "sample_flags", "mode": "decoding_mode"}


def _flat(value: Any, prefix: str) -> Row:
    """Nested mappings as dotted columns; a list one cell (a list; JSON text in CSV)."""
    if isinstance(value, dict):
        out: Row = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}.{key}"))
        return out
    if isinstance(value, tuple):
        return {prefix: list(value)}
    return {prefix: value}


def _arm_columns(arm: Arm) -> Row:
    data = arm.model_dump(mode="json", exclude={"name", "sweep"})
    out: Row = {}
    for key, value in data.items():
        if isinstance(value, dict) and not value:
            continue
        out.update(_flat(value, f"arm.{key}"))
    return out


def sample_rows(summary: RunSummary, samples: Iterable[Sample], arms: Sequence[Arm]) -> list[Row]:
    """One flat row per sample, with its arm's settings, fingerprint and engine version as columns."""
    by_name = {a.name: _arm_columns(a) for a in arms}
    rows = []
    for s in samples:
        row: Row = {}
        for key, value in s.model_dump(mode="json", exclude={"gpu"}).items():
            row[EXPORT_NAMES.get(key, key)] = json.dumps(value) if isinstance(value, dict) else value
        # each flag's name apart from its free-text detail: filter on "foreign-load", not on a line's prefix
        row["sample_flag_names"] = [flag_name(f) for f in s.flags]
        for key, value in (s.gpu.model_dump(mode="json") if s.gpu else {}).items():
            row[f"gpu.{key}"] = json.dumps(value) if isinstance(value, dict) else value
        engine = summary.engines.get(s.arm)
        row["arm.fingerprint"] = engine.fingerprint if engine else None
        row["engine.version"] = engine.version if engine else None
        row.update(by_name.get(s.arm.split("@")[0], {}))
        rows.append(row)
    return rows


def _point_row(summary: RunSummary, table: str, row: PointRow) -> Row:
    out: Row = {"run_id": summary.run_id, "table": table, "arm": row.arm}
    out.update({f"point.{k}": v for k, v in row.point.items()})
    out.update(_interval("decode_tps", row.decode))
    out.update({"n": row.n, "errors": row.errors, "is_baseline": row.is_baseline})
    out.update(_comparison(row.vs_baseline))
    acc = row.acceptance
    out.update({"acceptance": acc.acceptance if acc else None,
                "mean_accepted_len": acc.mean_accepted_len if acc else None,
                "ttft_s": row.ttft_s, "prefill_tps": row.prefill_tps})
    out.update(_interval("aggregate_tps", row.aggregate))
    engine = summary.engines.get(row.arm)
    out["fingerprint"] = engine.fingerprint if engine else None
    return out


def _interval(name: str, ci: Any) -> Row:
    return {name: ci.estimate if ci else None, f"{name}_lo": ci.lo if ci else None, f"{name}_hi": ci.hi if ci else None}


def _comparison(c: Any) -> Row:
    return {"vs_baseline": c.ratio.estimate if c else None, "vs_baseline_lo": c.ratio.lo if c else None,
            "vs_baseline_hi": c.ratio.hi if c else None, "verdict": c.verdict if c else None,
            "reference": c.reference if c else None}


def point_rows(summary: RunSummary) -> list[Row]:
    """Each arm overall, then each row of the sweep, depth and concurrency sections."""
    rows = []
    for a in summary.arms:
        rows.append(_point_row(summary, "overall", PointRow(
            arm=a.arm, n=a.n, errors=a.errors, decode=a.median, vs_baseline=summary.comparison(a.arm),
            is_baseline=a.arm == summary.baseline, ttft_s=a.ttft_median, prefill_tps=a.prefill_median)))
        pooled = next((x for x in summary.acceptance if x.arm == a.arm), None)
        rows[-1].update(acceptance=a.acceptance, mean_accepted_len=pooled.mean_accepted_len if pooled else None)
    for table in (summary.sweep, summary.depth, summary.concurrency):
        if table is not None:
            rows += [_point_row(summary, table.kind, r) for r in table.rows]
    if summary.load is not None:
        rows += [{"run_id": summary.run_id, **_load_row(p)} for p in summary.load.points]
    if summary.capacity is not None:
        rows += capacity_rows(summary.capacity, summary.run_id)
    return rows


def _load_row(p: LoadPoint) -> Row:
    """A load point: its percentiles (``ttft_s.p99`` with ``_lo``/``_hi``), goodput per tier, tok/s."""
    row: Row = {"table": "load", "arm": p.arm, f"point.{p.load}": p.value, "n": p.requests, "errors": p.errors,
                "is_baseline": p.is_baseline, **_interval("per_user_tps", p.per_user_tps),
                "aggregate_tps": p.aggregate_tps, "offered_rps": p.offered_rps, "tok_per_j": p.tok_per_j,
                "send_lag_p99_s": p.send_lag_p99_s, **_comparison(p.vs_baseline)}
    for metric, qs in p.percentiles.items():
        for q, ci in qs.items():
            row.update(_interval(f"{metric}.{q}", ci))
    row.update({f"goodput.{tier}": rps for tier, rps in p.goodput.items()})
    return row


def community_rows(summary: RunSummary) -> tuple[list[str], list[list[str]]]:
    """The community table with the machine, the engine build and the fingerprint added to each row."""
    header, rows = community_table(summary)
    gpus = [str(g.get("name")) for g in summary.gpus if g.get("name")]
    machine = ", ".join(gpus) or str(summary.host.get("cpu_model") or "?")
    out = []
    for row in rows:
        engine = summary.engines.get(row[0])
        build = f"{engine.engine} {engine.version or ''}".strip() if engine else "?"
        out.append([*row, machine, build, (engine.fingerprint if engine else None) or "–"])
    return [*header, "machine", "engine", "fingerprint"], out


def _columns(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def _parquet_table(rows: Sequence[Row], columns: list[str]) -> Any:
    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError("--format parquet needs pyarrow: pip install -e '.[analysis]' in the bakeoff checkout "
                          "(or use --format csv or jsonl, which need nothing more)") from None
    data: dict[str, list[Any]] = {c: [r.get(c) for r in rows] for c in columns}
    for name, values in data.items():  # a column mixing kinds (a swept value: 2, 'mod') is kept as text
        kinds = {type(v) for v in values if v is not None}
        if kinds == {list} and len({type(x) for v in values if v for x in v}) > 1:
            data[name] = [None if v is None else json.dumps(v) for v in values]  # a list of mixed kinds
        elif len(kinds) > 1 and kinds != {int, float}:
            data[name] = [None if v is None else json.dumps(v) if isinstance(v, list) else str(v) for v in values]
    return pa.table(data)


def write_table(rows: Sequence[Row], path: Path, fmt: Literal["csv", "parquet", "jsonl"]) -> Path:
    """Write ``rows`` (dicts, columns in first-seen order) to ``path`` in ``fmt``."""
    columns = _columns(rows)
    if fmt == "parquet":
        table = _parquet_table(rows, columns)
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif fmt == "jsonl":
        with path.open("w") as f:
            for r in rows:
                f.write(json.dumps({c: r.get(c) for c in columns}) + "\n")
    else:
        with path.open("w", newline="") as f:  # a cell is text: lists as JSON text
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows)
    return path


def export_run(run_path: Path, fmt: Format, out: Path, *, summary: RunSummary | None = None) -> list[Path]:
    """Write a run's exports into ``out``: samples.FMT and points.FMT, or community.md.

    :raises ConfigError: an unknown format, or parquet without pyarrow.
    :raises MeasurementError: ``out`` cannot be written.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    summary = summary or summarize_run(run_path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if fmt == "community":
            target = out / "community.md"
            target.write_text(markdown_table(*community_rows(summary)) + "\n")
            return [target]
        record, samples = load_run(run_path)
        arms = record.config.arms if record.config else []
        return [write_table(sample_rows(summary, samples, arms), out / f"samples.{fmt}", fmt),
                write_table(point_rows(summary), out / f"points.{fmt}", fmt)]
    except OSError as exc:
        raise MeasurementError(f"cannot write the exports into {out}: {exc.strerror or exc}") from exc
