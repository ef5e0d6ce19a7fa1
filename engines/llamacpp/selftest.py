"""``bakeoff selftest llamacpp``: every speculative method the llama.cpp adapter maps, run for real.

Each method runs on tiny synthesized models (engines/llamacpp/synth.py) with *agreeing* weights, so a
working path must show drafts and near-total acceptance, and a path that llama-server accepted but
silently switched off shows up as "speculative: false" or zero drafts. The cases go through core's
self-test runner, i.e. the normal preflight → launch → request protocol, with the flags the adapter
really emits. DFlash2 has no method of its own: it is a ``dflash`` draft that llama.cpp recognises
by its selector tensors, so it gets its own row.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bakeoff.core import Arm, Prompt, SelftestCase, Settings, Speculative

from .options import LlamaCppOptions
from .spec import NGRAM_VARIANTS, SPECULATIVE, spec_args
from .synth import SynthSpec, synth_pair, synthesize

__all__ = ["selftest_cases"]

MIN_ACCEPTANCE = 0.99  # agreeing weights: every draft token should be accepted
# n-gram knobs small enough to draft within one short answer (ngram-mod's defaults wait for 48+ tokens).
# ngram-simple copies what followed the most recent match, which for a one-token loop is one token, and
# it drafts nothing when that is shorter than the n-gram: so n-grams of 1.
NGRAM_KNOBS: dict[str, dict[str, int]] = {
    "mod": {"n_max": 8, "n_min": 1, "lookup_min": 4},
    "simple": {"n_max": 8, "lookup_max": 1},
    "map-k": {"n_max": 8, "lookup_max": 4},
    "map-k4v": {"n_max": 8, "lookup_max": 4},
    "cache": {},
}
# ngram-cache learns n-grams from the prompt only, so its prompt holds the loop the tiny target writes
# (SmolLM2's ' the'); the map-based speculators do better without it.
REPEAT_PROMPT = Prompt(name="selftest-repeat", kind="code", messages=[
    {"role": "user", "content": "Repeat after me: the the the the the the the the the the the the"}])


def _flags(arm: Arm) -> str:
    """The speculative flags bakeoff emits for an arm, with model paths shortened to file names."""
    out = []
    for arg in spec_args(arm, LlamaCppOptions.model_validate(arm.options)):
        out.append(Path(arg).name if "/" in arg else arg)
    return " ".join(out)


def selftest_cases(log: Callable[[str], None] = lambda msg: None,
                   synth_root: Path | None = None) -> tuple[list[SelftestCase], list[str]]:
    """The cases for every method the adapter maps (:data:`~.spec.SPECULATIVE`), and the methods it has no case
    for."""
    log("synthesizing tiny models (cached after the first run)")
    mtp = synthesize(SynthSpec("mtp", agree=True), root=synth_root)
    pairs = {kind: synth_pair(kind, agree=True, root=synth_root) for kind in ("dflash", "dflash2", "dspark", "eagle3")}
    target = pairs["dflash"][0]
    settings = Settings(ctx=1024)

    def case(label: str, model: Path, spec: Speculative | None = None, expect: bool = True,
             min_acceptance: float | None = MIN_ACCEPTANCE, prompt: Prompt | None = None,
             arm_settings: Settings = settings) -> SelftestCase:
        arm = Arm(name=f"selftest-{label}", engine="llamacpp", model=str(model), settings=arm_settings,
                  speculative=spec or Speculative())
        return SelftestCase(label, arm, _flags(arm), expect_speculation=expect,
                            min_acceptance=min_acceptance if expect else None, prompt=prompt)

    cases: list[SelftestCase] = []
    missing: list[str] = []
    for method in dict.fromkeys(key.partition("/")[0] for key in SPECULATIVE):
        if method == "none":  # with the CPU settings flags bakeoff maps (-t -b -ub -ctk -ctv -fa), accepted too
            cpu_settings = Settings(ctx=1024, threads=2, batch=256, ubatch=128, kv_type="f16", flash_attn="auto")
            cases.append(case("none", target, expect=False, arm_settings=cpu_settings))
        elif method == "mtp":
            cases.append(case("mtp", mtp, Speculative(method="mtp", n_max=2)))
        elif method == "dflash":
            for kind in ("dflash", "dflash2"):
                tgt, draft = pairs[kind]
                cases.append(case(kind, tgt, Speculative(method="dflash", draft_model=str(draft), n_max=3)))
        elif method in ("dspark", "eagle3"):
            tgt, draft = pairs[method]
            spec = Speculative.model_validate({"method": method, "draft_model": str(draft), "n_max": 3})
            cases.append(case(method, tgt, spec))
        elif method == "draft":  # the target as its own draft: greedy drafts are always right
            # n_min and p_min too, so every --spec-draft-* flag bakeoff emits is accepted by this build
            cases.append(case("draft", target, Speculative(method="draft", draft_model=str(target), n_max=3, n_min=1,
                                                           p_min=0.05)))
        elif method == "ngram":
            for variant in NGRAM_VARIANTS:
                spec = Speculative.model_validate({"method": "ngram", "variant": variant,
                                                   **NGRAM_KNOBS.get(variant, {})})
                cases.append(case(f"ngram-{variant}", target, spec, min_acceptance=None,
                                  prompt=REPEAT_PROMPT if variant == "cache" else None))
        else:
            missing.append(method)
    return cases, missing

