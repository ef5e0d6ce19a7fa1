"""How llama.cpp names the shared speculative vocabulary: one table of ``--spec-type`` values and the flag each
knob becomes (llama-server --help, b11434). The adapter's capabilities, its launch flags, its read-back of the
method and the self-test's flag column are all derived from it, so what is declared is exactly what is mapped.
"""

from __future__ import annotations

from bakeoff.core import Arm, Capabilities, DraftRule, MethodKnobs, method_key
from bakeoff.core import cli_flags as _flags

from .options import LlamaCppOptions

__all__ = ["DEFAULT_VARIANTS", "NGRAM_VARIANTS", "SPECULATIVE", "SPEC_FLAGS", "SPEC_TYPES", "spec_args", "spec_type"]

# shared vocabulary -> llama.cpp --spec-type
SPEC_TYPES = {
    "none": "none",
    "mtp": "draft-mtp",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "eagle3": "draft-eagle3",
    "draft": "draft-simple",
}
NGRAM_VARIANTS = ("mod", "simple", "map-k", "map-k4v", "cache")
_DRAFT_FLAGS = {"n_max": "--spec-draft-n-max", "n_min": "--spec-draft-n-min", "p_min": "--spec-draft-p-min"}
# One table says which knobs each method/variant takes and the flag each becomes (llama-server --help, b11434);
# the capabilities below are derived from it, so what is declared is exactly what is mapped.
SPEC_FLAGS: dict[str, dict[str, str]] = {
    "none": {},
    **{method: _DRAFT_FLAGS for method in ("mtp", "dflash", "dspark", "eagle3", "draft")},
    "ngram/mod": {"n_max": "--spec-ngram-mod-n-max", "n_min": "--spec-ngram-mod-n-min",
                  "lookup_min": "--spec-ngram-mod-n-match"},
    **{f"ngram/{v}": {"n_max": f"--spec-ngram-{v}-size-m", "lookup_max": f"--spec-ngram-{v}-size-n"}
       for v in ("simple", "map-k", "map-k4v")},
    "ngram/cache": {},  # learns from the text itself; its only inputs are cache files (-lcs/-lcd)
}
# MTP runs from the target's own heads or from a separate file with MTP tensors; -md alone disables the rest
DRAFT_RULES: dict[str, DraftRule] = {"mtp": "optional", "dflash": "required", "dspark": "required",
                                     "eagle3": "required", "draft": "required"}
DEFAULT_VARIANTS = {"ngram": "mod"}
SPECULATIVE = {key: MethodKnobs(knobs=tuple(flags), draft_model=DRAFT_RULES.get(key, "forbidden"))
               for key, flags in SPEC_FLAGS.items()}
_METHODS = Capabilities(speculative=SPECULATIVE, default_variants=DEFAULT_VARIANTS)  # for method_key


def spec_type(arm: Arm) -> str:
    """The ``--spec-type`` of an arm: ``draft-simple``, ``ngram-mod`` (the default n-gram variant), …"""
    key = method_key(_METHODS, arm.speculative) or arm.speculative.method
    return f"ngram-{key.partition('/')[2]}" if arm.speculative.method == "ngram" else SPEC_TYPES[key]


def spec_args(arm: Arm, options: LlamaCppOptions | None = None, draft: str | None = None) -> list[str]:
    """The speculative flags for an arm, always with an explicit --spec-type.

    Only the knobs :data:`SPEC_FLAGS` declares for the arm's method/variant are mapped; core refused
    every other one before launch.
    """
    spec = arm.speculative
    key = method_key(_METHODS, spec) or spec.method
    args = ["--spec-type", spec_type(arm)]
    if spec.draft_model:
        args += ["-md", draft or spec.draft_model]
        if options and options.draft_gpu_layers is not None:
            args += ["-ngld", str(options.draft_gpu_layers)]
    return args + _flags([(flag, getattr(spec, knob)) for knob, flag in SPEC_FLAGS.get(key, {}).items()])
