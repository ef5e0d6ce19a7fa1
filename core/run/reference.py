"""The engine's own benchmark beside each arm (``--llama-bench`` of ``bakeoff run`` and ``bakeoff conform``).

Made after the arms' answers are stored and their engines stopped, from those answers' depth and length
(core/analysis/reference.py); an arm whose adapter has no ``reference_bench`` piece is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..analysis.reference import BenchReference, bench_inputs, write_references
from ..config.schema import BakeoffFile
from ..engine.registry import load_engine
from ..host.hostinfo import CpuMeter
from ..results.sample import Sample
from ..results.store import RunDir

__all__ = ["bench_references", "write_run_references"]


def bench_references(config: BakeoffFile, samples: Sequence[Sample],
                     log: Callable[[str], None] = lambda msg: None) -> dict[str, BenchReference]:
    """Per arm whose adapter has an engine's own benchmark (llama.cpp's llama-bench), that benchmark at the depth
    and length of the arm's plain answers in ``samples``, with the arm's decode rates beside it."""
    out: dict[str, BenchReference] = {}
    for arm in config.arms:
        adapter = load_engine(arm.engine)
        if adapter.reference_bench is None:
            continue
        depth, n_gen, rates = bench_inputs(samples, arm.name)
        meter = CpuMeter(set())  # the benchmark runs in bakeoff's own process group: its CPU is ours
        meter.start()
        made = adapter.reference_bench.reference(adapter, arm, depth, n_gen, rates, log)
        foreign = meter.stop()
        out[arm.name] = BenchReference.model_validate({**made, "foreign_cores": foreign, "foreign_limit":
                                                       meter.foreign_limit() if foreign is not None else None})
    return out


def write_run_references(config: BakeoffFile, run: RunDir,
                         log: Callable[[str], None] = lambda msg: None) -> dict[str, BenchReference]:
    """The references of a finished run, kept in its ``references.json`` for every report of it."""
    refs = bench_references(config, run.samples(), log)
    write_references(run.path, refs)
    return refs
