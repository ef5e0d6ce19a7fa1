"""``bakeoff merge BUNDLE...``: one report across bundles from several machines or people.

Each bundle is verified (core/results/bundle.py), unpacked, and summarized by itself with the run summary
every report uses (core/reports/model.py): its arms, and each arm against its own run's baseline, paired
request by request, exactly as its own report says. Nothing is ever paired across bundles: requests on two
machines share no engine start, no pass, no moment.

Across bundles, arms are matched by their configuration fingerprint (core/config/fingerprint.py). Arms with
the same fingerprint are the same configuration, so what separates them is the machine (or the engine build,
or the day): they are compared as hardware, unpaired (each side resampled on its own, over the prompts and
modes both measured: core/analysis/stats.py ``unpaired_ratio``), labelled with what differs, in the summary's
``hardware`` section, never as an arm effect. Arms whose fingerprints differ are not compared across bundles;
the report says what differs. A sample found in two bundles (the same run bundled twice, or two copies of one
run) is refused: it would count twice.

Arms are renamed ``ARM@LABEL``, a label per bundle (the GPU's or CPU's name unless given). The merged summary
is a :class:`~bakeoff.core.reports.model.RunSummary`, so the terminal, markdown, HTML and JSON renderers draw
it as they draw any run; the bundles (hardware, builds, hashes) are listed above it, and a bundle whose run did
less than it planned is said to be incomplete there, before any number, with the arms it never measured.
A label is one plain name (it is the directory a bundle unpacks into): anything else is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..analysis.stats import LEVEL, N_BOOT, Comparison, unpaired_ratio, verdict
from ..common.errors import BundleError
from ..config.fingerprint import fingerprint_differences
from ..host.rig import hardware_differences, hardware_key
from ..results.bundle import BundleManifest, Verified, extract_bundle, home_relative, verify_bundle
from ..results.sample import Sample
from ..results.store import read_samples
from .capacity import merge_capacity
from .markdown import markdown_table, render_markdown
from .model import Bootstrap, RunSummary, summarize_run
from .points import PointTable

__all__ = ["MERGE_SCHEMA", "BundleInfo", "MergedReport", "bundle_rows", "merge_bundles", "render_merge_markdown"]

MERGE_SCHEMA = 1


class BundleInfo(BaseModel):
    """One merged bundle: where it came from and on what it ran."""

    label: str
    file: str
    sha256: str
    run_id: str
    name: str | None = None
    samples: int
    hardware: dict[str, Any] = Field(description="CPU model and cores, GPU names (core/host/rig.py hardware_key).")
    rig: dict[str, Any] = Field(default_factory=dict, description="The bundle's rig report.")
    engines: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per arm: the engine build.")
    incomplete: str | None = Field(None, description="For a run that did less than it planned: what it did "
                                   "(``0 of 1 passes complete (2 of 16 samples)``); None when complete.")


class MergedReport(BaseModel):
    schema_version: int = MERGE_SCHEMA
    kind: str = "bakeoff-merge"
    bundles: list[BundleInfo]
    notes: list[str] = Field(default_factory=list, description="Which arms were compared across bundles and why "
                                                               "the others were not.")
    summary: RunSummary


@dataclass
class _Opened:
    verified: Verified
    manifest: BundleManifest
    label: str
    path: Path
    summary: RunSummary
    samples: list[Sample]
    hardware: dict[str, Any]


# a label is a directory under --out (each bundle unpacks into OUT/bundles/LABEL) and the suffix of arm names
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,39}")
_LABEL_NOISE = re.compile(r"\((?:R|TM|tm|r)\)|\bCPU\b|@.*$|\bProcessor\b|\d+-Core")


def _default_label(manifest: BundleManifest) -> str:
    gpus = [str(g.get("name")) for g in manifest.rig.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if gpus:
        text = gpus[0] + (f"x{len(gpus)}" if len(gpus) > 1 else "")
    else:
        text = str((manifest.rig.get("cpu") or {}).get("model") or "host")
    text = _LABEL_NOISE.sub(" ", text)
    text = re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-")[:40]
    return text if _LABEL.fullmatch(text) else "host"  # a rig named ".." is a bundle's to claim, not a path


def _checked_label(label: str) -> str:
    """A given label, refused unless it is one plain name: ``../../X`` or ``a/b`` would unpack outside --out."""
    if not _LABEL.fullmatch(label):
        raise BundleError(f"--label {label!r}: a label names the directory a bundle unpacks into and ends its "
                          "arm names (ARM@LABEL): give 1 to 40 letters, digits, '.', '_', '+' or '-', starting "
                          "with a letter or digit")
    return label


def _labels(manifests: Sequence[BundleManifest], given: Sequence[str]) -> list[str]:
    if given and len(given) != len(manifests):
        raise BundleError(f"--label: give one per bundle ({len(manifests)}), or none")
    out: list[str] = []
    for i, m in enumerate(manifests):
        base = _checked_label(given[i]) if given else _default_label(m)
        label, n = base, 2
        while label in out:
            label, n = f"{base}-{n}", n + 1
        out.append(label)
    return out


def _sample_key(s: Sample, run_id: str) -> tuple[Any, ...]:
    return (s.run_id or run_id, s.arm, s.prompt, s.mode, s.rep, s.pass_index, s.depth, s.concurrency, s.max_tokens,
            s.rate, s.started_at, s.output_sha256)


def _refuse_duplicates(opened: Sequence[_Opened]) -> None:
    seen: dict[tuple[Any, ...], str] = {}
    for o in opened:
        repeated: dict[str, int] = {}
        for s in o.samples:
            key = _sample_key(s, o.manifest.run_id)
            if key in seen:
                repeated[seen[key]] = repeated.get(seen[key], 0) + 1
            else:
                seen[key] = o.label
        for other, n in repeated.items():
            raise BundleError(f"{o.verified.path.name} repeats {n} sample(s) of {other} (run {o.manifest.run_id}): "
                              "merge each run once (a sample counted twice would narrow every interval)")


def _renamed_comparison(c: Comparison, label: str) -> Comparison:
    return c.model_copy(update={"arm": f"{c.arm}@{label}", "reference": f"{c.reference}@{label}"})


def _merged_points(tables: Sequence[tuple[str, PointTable | None]]) -> PointTable | None:
    present = [(label, t) for label, t in tables if t is not None and t.rows]
    if not present:
        return None
    first = present[0][1]
    keys = list(dict.fromkeys(k for _, t in present for k in t.keys))
    rows = [r.model_copy(update={"arm": f"{r.arm}@{label}", "vs_baseline": _renamed_comparison(r.vs_baseline, label)
                                 if r.vs_baseline else None}) for label, t in present for r in t.rows]
    return PointTable(kind=first.kind, title=first.title, keys=keys, rows=rows)


def _common(values: Sequence[Any]) -> Any:
    return values[0] if values and all(v == values[0] for v in values) else None


def _hardware_comparisons(opened: Sequence[_Opened], *, n_boot: int, level: float,
                          seed: int) -> tuple[list[Comparison], list[str]]:
    """Same fingerprint in several bundles: each later copy against the first, unpaired, labelled; and a note
    for each arm name found in several bundles under different configurations."""
    first: dict[str, tuple[_Opened, list[str]]] = {}  # fingerprint -> the first bundle with it, its arms there
    out: list[Comparison] = []
    notes: list[str] = []
    for o in opened:
        for arm, fp in o.manifest.fingerprints.items():
            if fp.id not in first:
                first[fp.id] = (o, [a for a, f in o.manifest.fingerprints.items() if f.id == fp.id])
            ref_bundle, twins = first[fp.id]
            if ref_bundle is o:
                continue  # twins within one run: its own report compares them, paired
            ref_arm = arm if arm in twins else twins[0]
            ratio = unpaired_ratio([s for s in o.samples if s.arm == arm],
                                   [s for s in ref_bundle.samples if s.arm == ref_arm], n_boot=n_boot, level=level,
                                   seed=seed, key=f"hardware/{fp.id}/{arm}@{o.label}")
            name, against = f"{arm}@{o.label}", f"{ref_arm}@{ref_bundle.label}"
            if ratio is None:
                notes.append(f"{name} and {against}: the same configuration ({fp.id}) but no prompt, mode and "
                             "length measured by both: not compared")
                continue
            hw = hardware_differences(ref_bundle.hardware, o.hardware)
            what = ("hardware differs: " + "; ".join(hw)) if hw else "same hardware: runs made at different times"
            builds = _build_difference(ref_bundle.manifest.engines.get(ref_arm, {}), o.manifest.engines.get(arm, {}))
            out.append(Comparison(arm=name, reference=against, ratio=ratio, verdict=verdict(ratio), paired=False,
                                  notes=[f"same configuration {fp.id}; {what}" + (f"; {builds}" if builds else "")]))
    by_name: dict[str, list[tuple[_Opened, str]]] = {}
    for o in opened:
        for arm in o.manifest.fingerprints:
            by_name.setdefault(arm, []).append((o, arm))
    for copies in by_name.values():
        ids = {o.manifest.fingerprints[a].id for o, a in copies}
        if len(copies) > 1 and len(ids) > 1:
            (oa, a), *rest = copies
            for ob, b in rest:
                if ob.manifest.fingerprints[b].id == oa.manifest.fingerprints[a].id:
                    continue
                diff = fingerprint_differences(oa.manifest.fingerprints[a].canonical,
                                               ob.manifest.fingerprints[b].canonical)
                notes.append(home_relative(f"{a}@{oa.label} and {b}@{ob.label}: different configurations, not "
                                           f"compared across bundles ({'; '.join(diff[:4])}"
                                           f"{'; …' if len(diff) > 4 else ''})"))
    for o in opened:
        if not o.manifest.fingerprints:
            notes.append(f"{o.label}: its run recorded no configuration fingerprints (made before them): its arms "
                         "are not compared with other bundles")
    return out, notes


def _incomplete(o: _Opened) -> str | None:
    """What a bundle's run did short of its plan, where and why it stopped, and which arms have no sample
    (absent from every table); None for a complete run. Its own report's resume hint is left out: the run is
    another machine's, and its copy here is no place to measure the rest."""
    p = o.summary.progress
    if p is None or p.complete:
        return None
    where = f"; stopped {p.stopped_at}" if p.stopped_at else ""
    unmeasured = [f"{a.arm}@{o.label}" for a in p.arms if a.samples_measured == 0]
    absent = f"; no sample of {', '.join(unmeasured)}, so it is in no table" if unmeasured else ""
    return f"{o.label}: INCOMPLETE RUN: {p.line}{where}: {p.stopped_why}{absent}"


def _bundle_warnings(o: _Opened) -> list[str]:
    """A bundle's own report warnings, labelled; its incomplete-run lead is said by :func:`_incomplete`."""
    lead = o.summary.progress.warning if o.summary.progress else None
    return [f"{o.label}: {w}" for w in o.summary.warnings if w != lead]


def _build_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The engine builds of two copies of a configuration, when they differ: versions, else binaries."""
    va, vb = ", ".join(a.get("versions") or []) or "?", ", ".join(b.get("versions") or []) or "?"
    if va != vb:
        return f"engine build {va} → {vb}"
    pa, pb = (a.get("binary") or {}).get("path"), (b.get("binary") or {}).get("path")
    if not (pa and pb and pa != pb):
        return ""
    return f"engine binary {home_relative(pa)} → {home_relative(pb)} (same version {va})"  # no one's home named


def merge_bundles(bundles: Sequence[Path], workdir: Path, *, labels: Sequence[str] = (), n_boot: int = N_BOOT,
                  level: float = LEVEL, seed: int = 0) -> MergedReport:
    """Verify, unpack (into ``workdir/LABEL``), summarize and merge ``bundles`` (see the module docstring).

    :raises BundleError: fewer than two bundles, a bundle that does not verify, duplicate samples, bad labels.
    """
    if len(bundles) < 2:
        raise BundleError("give at least two bundles to merge")
    verified = [verify_bundle(b) for b in bundles]
    bad = [v for v in verified if not v.ok]
    if bad:
        raise BundleError("; ".join(f"{v.path} does not verify ({len(v.problems)} problem(s), first: "
                                    f"{v.problems[0]}); `bakeoff verify {v.path}` lists them" for v in bad))
    manifests = [v.manifest for v in verified if v.manifest is not None]
    names = _labels(manifests, labels)
    opened: list[_Opened] = []
    for v, m, label in zip(verified, manifests, names, strict=True):
        path = extract_bundle(v, workdir / label)
        opened.append(_Opened(v, m, label, path, summarize_run(path, n_boot=n_boot, level=level),
                              read_samples(path), hardware_key({"rig": m.rig})))
    _refuse_duplicates(opened)
    hardware, notes = _hardware_comparisons(opened, n_boot=n_boot, level=level, seed=seed)
    incomplete = [line for o in opened if (line := _incomplete(o))]
    summaries = [o.summary for o in opened]
    prompts = list(dict.fromkeys(p for s in summaries for p in s.prompts))
    summary = RunSummary(
        tool={"name": "bakeoff", "version": version("bakeoff")},
        run_id="merge-" + hashlib.sha256("".join(v.sha256 for v in verified).encode()).hexdigest()[:12],
        name=" + ".join(f"{s.name}@{o.label}" for s, o in zip(summaries, opened, strict=True)),
        baseline=f"{summaries[0].baseline}@{opened[0].label}" if summaries[0].baseline else None,
        prompts=prompts, modes=list(dict.fromkeys(m for s in summaries for m in s.modes)),
        max_tokens=_common([s.max_tokens for s in summaries]), reps=_common([s.reps for s in summaries]),
        requests_per_pass=_common([s.requests_per_pass for s in summaries]),
        passes=max(s.passes for s in summaries), bootstrap=Bootstrap(n_boot=n_boot, level=level, seed=seed),
        engines={f"{arm}@{o.label}": e for o in opened for arm, e in o.summary.engines.items()},
        arms=[a.model_copy(update={"arm": f"{a.arm}@{o.label}"}) for o in opened for a in o.summary.arms],
        comparisons=[_renamed_comparison(c, o.label) for o in opened for c in o.summary.comparisons],
        energy_comparisons=[_renamed_comparison(c, o.label) for o in opened for c in o.summary.energy_comparisons],
        mismatches={f"{arm}@{o.label}": m for o in opened for arm, m in o.summary.mismatches.items()},
        complete=not incomplete,
        warnings=incomplete + [w for o in opened for w in _bundle_warnings(o)],
        failures=[f.model_copy(update={"arm": f"{f.arm}@{o.label}"}) for o in opened for f in o.summary.failures],
        acceptance=[a.model_copy(update={"arm": f"{a.arm}@{o.label}"}) for o in opened for a in o.summary.acceptance],
        sweep=_merged_points([(o.label, o.summary.sweep) for o in opened]),
        depth=_merged_points([(o.label, o.summary.depth) for o in opened]),
        concurrency=_merged_points([(o.label, o.summary.concurrency) for o in opened]),
        capacity=merge_capacity([(o.label, o.summary.capacity) for o in opened]),
        hardware=hardware)
    if summary.max_tokens is None or summary.reps is None:
        summary.warnings.append("the bundles differ in output tokens or reps per prompt: see each bundle's own "
                                "report for its design")
    infos = [BundleInfo(label=o.label, file=o.verified.path.name, sha256=o.verified.sha256, run_id=o.manifest.run_id,
                        name=o.manifest.name, samples=o.manifest.samples,
                        hardware=o.hardware, rig=o.manifest.rig, engines=o.manifest.engines,
                        incomplete=o.summary.progress.line if o.summary.progress and not o.summary.complete
                        else None) for o in opened]
    return MergedReport(bundles=infos, notes=incomplete + notes, summary=summary)  # said before any number


def _rig_line(rig: dict[str, Any]) -> str:
    parts = []
    for g in rig.get("gpus") or []:
        limit = g.get("power_limit_w")
        default = g.get("power_limit_default_w")
        cap = f", {limit:.0f} W of {default:.0f} W default" if limit and default else ""
        link = (f", PCIe gen {g.get('pcie_gen')}/{g.get('pcie_gen_max')} x{g.get('pcie_width')}"
                f"/{g.get('pcie_width_max')}" if g.get("pcie_gen") else "")
        parts.append(f"{g.get('name')} (driver {g.get('driver')}{cap}{link})")
    cpu = rig.get("cpu") or {}
    parts.append(f"{cpu.get('model') or '?'} ({cpu.get('logical_cores') or '?'} threads"
                 + (f", {cpu['governor']}" if cpu.get("governor") else "") + ")")
    mem = (rig.get("memory") or {}).get("total_gib")
    if mem:
        parts.append(f"{mem} GiB")
    return "; ".join(parts)


def bundle_rows(m: MergedReport) -> tuple[list[str], list[list[str]]]:
    """The bundles table: label, run, hardware (rig), engine builds, samples, the bundle's SHA-256."""
    header = ["label", "run", "rig", "engine builds", "samples", "bundle sha256"]
    rows = []
    for b in m.bundles:
        builds = sorted({f"{e.get('engine')} {', '.join(e.get('versions') or []) or '?'}" for e in b.engines.values()})
        samples = f"{b.samples} (INCOMPLETE: {b.incomplete})" if b.incomplete else str(b.samples)
        rows.append([b.label, f"{b.name or '?'} ({b.run_id})", _rig_line(b.rig), "; ".join(builds), samples,
                     b.sha256[:16] + "…"])
    return header, rows


def render_merge_markdown(m: MergedReport) -> str:
    parts = [f"## Merged: {len(m.bundles)} bundles", "", markdown_table(*bundle_rows(m)), ""]
    parts += [f"- {n}" for n in m.notes]
    return "\n".join(parts) + "\n\n" + render_markdown(m.summary)
