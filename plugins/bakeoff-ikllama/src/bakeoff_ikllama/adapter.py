"""ik_llama.cpp ``llama-server`` adapter (a llama.cpp fork with its own flag dialect), built on ``bakeoff.core``'s
public names only.

Facts this adapter is built on (ik-llama-cpp-python 0.1.5, ``vendor/ik_llama.cpp``; read from
``common/common.cpp``, ``common/speculative.cpp`` and its server's sources, checked on a real server):

- Speculation is chosen by what is loaded, not by one ``--spec-type``: ``-md FILE`` loads a draft model,
  ``-mtp`` switches on the model's own MTP (NextN) layers, and ``--spec-type`` names only the n-gram kinds
  (``ngram-cache|simple|map-k|map-k4v|mod``). A draft model *and* an n-gram type are both used (n-gram
  first), so the draft arm passes no ``--spec-type``. ``-mtp`` on a model without NextN layers starts fine,
  warns, and runs without speculation: preflight reads the GGUF and refuses it.
- ``--draft-max/--draft-min`` apply to every method (the server caps and drops drafts by them);
  ``--draft-p-min`` only to the draft model and MTP; ``--spec-ngram-size-n`` is the n-gram lookup length
  (the match length of ``ngram-mod``), ``--spec-ngram-size-m`` the proposal length of simple/map-k/map-k4v,
  ``--spec-ngram-min-hits`` the map kinds' threshold; ``ngram-cache`` drafts a fixed 8 tokens.
- Each response carries ``timings.draft_n`` / ``draft_n_accepted`` only when drafts were made; each request
  logs ``draft acceptance rate = R (A accepted / G generated)``. ``timings_per_token`` gives cumulative
  ``predicted_n`` on every chunk. ``predicted_per_second`` is ``predicted_n / predicted_ms`` (llama.cpp:
  ``predicted_n - 1``), so bakeoff recomputes it over the same window as its own decode rate.
- The GGUF's chat template is applied only with ``--jinja`` (llama.cpp: by default), so it is always passed:
  otherwise the same messages become different prompts on the two engines.
- ``/props`` has ``total_slots`` and ``default_generation_settings.n_ctx`` but nothing about speculation; the
  startup log says whether a speculative context was initialized.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import httpx

from bakeoff.core import (
    Arm,
    Capabilities,
    Effective,
    EngineAdapter,
    EngineLog,
    EngineUnavailable,
    LaunchInputs,
    LaunchSpec,
    MeasurementError,
    MethodKnobs,
    Missing,
    PreflightError,
    Reader,
    ServerStats,
    Workload,
    bounded_get,
    cli_flags,
    openai_model_id,
    read_gguf_header,
    resolve_model,
    sample_flag,
)

from .build import IkLlamaInstaller
from .options import IkLlamaOptions

__all__ = ["IkLlamaAdapter", "IkLlamaOptions", "parse_acceptance_lines", "speculation_from_log"]

NGRAM_VARIANTS = ("mod", "simple", "map-k", "map-k4v", "cache")
SPLIT_MODES = ("none", "layer", "attn", "graph")

# Which shared knobs each method and n-gram variant really takes here (see the module docstring).
SPECULATIVE = {
    "none": MethodKnobs(),
    "mtp": MethodKnobs(knobs=("n_max", "n_min", "p_min")),
    "draft": MethodKnobs(knobs=("n_max", "n_min", "p_min"), draft_model="required"),
    "ngram/mod": MethodKnobs(knobs=("n_max", "n_min", "lookup_min")),
    "ngram/simple": MethodKnobs(knobs=("n_max", "n_min", "lookup_max")),
    "ngram/map-k": MethodKnobs(knobs=("n_max", "n_min", "lookup_max")),
    "ngram/map-k4v": MethodKnobs(knobs=("n_max", "n_min", "lookup_max")),
    "ngram/cache": MethodKnobs(knobs=("n_min",)),  # drafts a fixed 8: --draft-max above 8 changes nothing
}
# The shared knob -> the fork's flag. n_max/n_min/p_min are server-wide; lookup_* pick --spec-ngram-size-n.
KNOB_FLAGS = {"n_max": "--draft-max", "n_min": "--draft-min", "p_min": "--draft-p-min",
              "lookup_min": "--spec-ngram-size-n", "lookup_max": "--spec-ngram-size-n"}

ACCEPTANCE_RE = re.compile(r"draft acceptance rate = (?P<rate>[\d.]+) \(\s*(?P<accepted>\d+) accepted /"
                           r"\s*(?P<generated>\d+) generated\)")
SPEC_ON = "speculative decoding context initialized"
SPEC_OFF = ("speculative decoding context not initialized", "MTP enabled via flag, but model has 0 NextN layers",
            "speculative decoding not supported by this context")

# (reason, needles, advice) — first match wins; the matching log line is quoted in the error.
STARTUP_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("unknown-flag", ("error: unknown argument", "error: invalid parameter for argument",
                      "unknown speculative decoding type", "error while handling argument"),
     "this ik_llama.cpp llama-server does not accept a flag bakeoff or extra_args passed"),
    ("incompatible-draft-vocab", ("draft model vocab type must match", "vocabs are not compatible"),
     "the draft model's vocabulary does not match the target's"),
    ("bad-draft-model", ("failed to load draft model", "failed to create draft context"),
     "the draft model could not be loaded"),
    ("out-of-memory", ("out of memory", "failed to allocate", "unable to allocate"),
     "not enough memory for the model, context or KV cache"),
    ("port-in-use", ("couldn't bind", "Address already in use", "address already in use"),
     "the port is taken by another process"),
    ("model-load-failed", ("failed to load model", "error loading model", "unable to load model"),
     "llama-server could not load the model"),
)


# options -> flags: value options, then switches (emitted only when True)
VALUE_OPTIONS = (("split_mode", "-sm"), ("max_gpu", "--max-gpu"), ("threads_batch", "-tb"), ("mla", "-mla"),
                 ("attention_max_batch", "-amb"), ("smart_expert_reduction", "-ser"),
                 ("ngram_size_m", "--spec-ngram-size-m"), ("ngram_min_hits", "--spec-ngram-min-hits"),
                 ("draft_gpu_layers", "-ngld"), ("verbosity", "--verbosity"))
SWITCH_OPTIONS = (("graph_scheduling", "-smgs"), ("run_time_repack", "-rtr"), ("no_fused_moe", "-no-fmoe"),
                  ("grouped_expert_routing", "-ger"), ("merge_qkv", "-mqkv"), ("k_cache_hadamard", "-khad"))


def parse_acceptance_lines(log_text: str) -> list[dict[str, float]]:
    """Every per-request ``draft acceptance rate = …`` line in a log chunk, as numbers."""
    return [{"rate": float(m["rate"]), "accepted": int(m["accepted"]), "generated": int(m["generated"])}
            for m in ACCEPTANCE_RE.finditer(log_text)]


def speculation_from_log(log_text: str) -> bool | None:
    """Whether the startup log says a speculative context runs (None when it says neither)."""
    if any(needle in log_text for needle in SPEC_OFF):
        return False
    return True if SPEC_ON in log_text else None


INSTALLER = IkLlamaInstaller()


class IkLlamaReader(Reader):
    """The fork's read-back: ``/props`` and the startup log after start, ``timings`` per chunk and per
    response, the ``draft acceptance rate`` log line as the cross-check."""

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        eff = Effective(model_id=openai_model_id(http))
        try:
            props = bounded_get(http, "/props").json()
        except (httpx.HTTPError, ValueError) as exc:
            eff.mismatches.append(f"could not read /props: {exc}")
            return eff
        n_ctx = props.get("default_generation_settings", {}).get("n_ctx")
        total_slots = props.get("total_slots")
        speculative = speculation_from_log(log.text()) if not arm.attached else None
        eff.version = self._version(arm)
        eff.raw = {"n_ctx_per_slot": n_ctx, "total_slots": total_slots, "speculative": speculative,
                   "model_path": props.get("model_path"), "version": eff.version}
        eff.context_tokens = n_ctx if isinstance(n_ctx, int) else None
        eff.slots = total_slots if isinstance(total_slots, int) else None
        eff.speculative = speculative
        eff.sources = {"context_tokens": ("/props", "n_ctx"), "slots": ("/props", "total_slots"),
                       "speculative": ("the startup log", "speculative context")}
        return eff

    def _version(self, arm: Arm) -> str | None:
        """``ik-llama-cpp-python==0.1.5 cpu`` from the cached build's VERSION file (the sdist has no git data)."""
        if arm.attached:
            return None
        try:
            options = IkLlamaOptions.model_validate(arm.options)
            binary = INSTALLER.binary(options.binary, options.build_version)
            return (binary.parent.parent / "VERSION").read_text().strip()
        except (OSError, EngineUnavailable):
            return None

    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        """Chat template, then tokenize with special tokens, as /v1/chat/completions does."""
        body: dict[str, Any] = {"messages": messages}
        if template_kwargs is not None:
            body["chat_template_kwargs"] = template_kwargs
        try:
            r = http.post("/apply-template", json=body, timeout=60)
            r.raise_for_status()
            r = http.post("/tokenize", json={"content": r.json()["prompt"], "add_special": True}, timeout=60)
            r.raise_for_status()
            return len(r.json()["tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise MeasurementError(f"ik_llama.cpp could not count prompt tokens: {exc}") from exc

    def chunk_token_count(self, payload: dict[str, Any]) -> object:
        timings = payload.get("timings")
        if isinstance(timings, dict) and "predicted_n" in timings:
            return int(timings["predicted_n"])
        return super().chunk_token_count(payload)

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        stats = ServerStats(source="timings")
        timings = (final or {}).get("timings") or {}
        if not timings:
            stats.flags.append(sample_flag("server-timings-missing").line())
            return stats
        n, ms = timings.get("predicted_n"), timings.get("predicted_ms")
        stats.completion_tokens = n
        stats.prompt_tokens = timings.get("prompt_n")
        stats.prefill_tps = timings.get("prompt_per_second")
        if isinstance(n, int) and n > 1 and isinstance(ms, (int, float)) and ms > 0:
            stats.decode_tps = (n - 1) / ms * 1000  # the window after the first token, as bakeoff's own rate
        stats.extra["engine_predicted_per_second"] = timings.get("predicted_per_second")
        # Absent keys mean the request drafted nothing, not "unknown".
        stats.drafted = int(timings.get("draft_n", 0))
        stats.accepted = int(timings.get("draft_n_accepted", 0))
        lines = parse_acceptance_lines(log.text())
        if lines:
            last = lines[-1]
            if (last["accepted"], last["generated"]) != (stats.accepted, stats.drafted):
                stats.flags.append(sample_flag("acceptance-log-mismatch").line(
                    f"log {last['accepted']:.0f}/{last['generated']:.0f} "
                    f"vs timings {stats.accepted}/{stats.drafted}"))
        elif stats.drafted and log.text():
            stats.flags.append(sample_flag("acceptance-crosscheck-missing").line(
                "no 'draft acceptance rate' log line for this request"))
        return stats


class IkLlamaAdapter(EngineAdapter[IkLlamaOptions]):
    name = "ikllama"
    description = "ik_llama.cpp llama-server (GGUF; fork of llama.cpp), native process"
    capabilities = Capabilities(
        speculative=SPECULATIVE,
        default_variants={"ngram": "mod"},
        settings=("ctx", "parallel", "threads", "gpu_layers", "split", "tensor_split", "kv_type", "flash_attn",
                  "batch", "ubatch"),
        split_modes=("none", "layer"),  # the fork's 'attn' and 'graph' are options.split_mode
        kv_types=("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1", "q6_0", "q8_KV"),
        token_counts="engine_per_chunk",  # timings_per_token: cumulative predicted_n on every chunk
        acceptance_source="timings.draft_n/draft_n_accepted per response, cross-checked with the "
                          "'draft acceptance rate' log line",
        stateful_speculators=("ngram-mod", "ngram-cache", "ngram-map-k", "ngram-map-k4v"),
        fixed_length_field="ignore_eos",
        thinking_field="chat_template_kwargs",
        build_options=("binary", "build_version"),
        setting_defaults={"parallel": 1},  # launch_spec passes -np 1 when parallel is unset
    )
    display_name = "ik_llama.cpp llama-server"
    startup_failures = STARTUP_FAILURES

    installer: ClassVar[IkLlamaInstaller] = INSTALLER
    reader = IkLlamaReader()

    def missing(self, arm: Arm) -> list[Missing]:
        if arm.launch != "native":
            return []
        try:
            options = self.options(arm)
            binary = self.installer.binary(options.binary, options.build_version)
        except EngineUnavailable:
            return [Missing("ik_llama.cpp's llama-server is not installed", "bakeoff engines install ikllama")]
        if not binary.is_file():
            return [Missing(f"ik_llama.cpp's llama-server {binary} does not exist",
                            "bakeoff engines install ikllama (or correct options.binary)")]
        return []

    # -- preflight -----------------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        options = self.options(arm)
        if arm.launch == "native":
            self.installer.locate(options)
        model = resolve_model(arm.launched_model)
        spec, who = arm.speculative, f"arm {arm.name!r}"
        variant = spec.variant or "mod"
        if options.split_mode and arm.settings.split:
            raise PreflightError(f"{who}: set the split mode once: settings.split or options.split_mode, not both")
        if (options.max_gpu or options.graph_scheduling) and options.split_mode != "graph":
            raise PreflightError(f"{who}: options.max_gpu and options.graph_scheduling act only with "
                                 f"options.split_mode 'graph'")
        if options.ngram_size_m is not None and not (spec.method == "ngram" and variant in ("simple", "map-k",
                                                                                           "map-k4v")):
            raise PreflightError(f"{who}: options.ngram_size_m acts only on ngram simple, map-k and map-k4v")
        if options.ngram_min_hits is not None and not (spec.method == "ngram" and variant in ("map-k", "map-k4v")):
            raise PreflightError(f"{who}: options.ngram_min_hits acts only on ngram map-k and map-k4v")
        if options.draft_gpu_layers is not None and spec.method != "draft":
            raise PreflightError(f"{who}: options.draft_gpu_layers needs speculative.method 'draft'")
        if spec.method == "mtp":
            layers = nextn_layers(model)
            if not layers:
                raise PreflightError(f"{who}: MTP needs a model with MTP (NextN) layers, but {model.name} has "
                                     f"none; ik_llama.cpp would start with speculation silently off")

    # -- launch --------------------------------------------------------------------------
    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        assert launch.program is not None  # core locates it for every native launch (resolve_launch)
        options, s = self.options(arm), arm.settings
        # --jinja: the GGUF's own chat template, as llama.cpp applies it by default; without it the fork uses a
        # built-in template (for SmolLM2: no default system prompt, 21 prompt tokens fewer than llama.cpp)
        argv = [*launch.program.argv, "-m", launch.model, "--host", s.host, "--port", str(launch.port),
                "--metrics", "--jinja", "-np", str(s.parallel or 1)]
        # settings.ctx is per request; with -np N (kv_unified off) the server splits -c into N slots
        argv += cli_flags([
            ("-c", s.ctx * (s.parallel or 1) if s.ctx else None), ("-t", s.threads), ("-ngl", s.gpu_layers),
            ("-sm", s.split),
            ("-ts", ",".join(f"{x:g}" for x in s.tensor_split) if s.tensor_split else None),
            ("-ctk", s.kv_type), ("-ctv", s.kv_type), ("-fa", s.flash_attn), ("-b", s.batch), ("-ub", s.ubatch),
        ])
        argv += self.option_args(options)
        argv += self.spec_args(arm, launch.draft_model)
        argv += arm.extra_args
        # cwd: the fork writes a llama.log into its working directory; keep it in the arm's run directory
        return LaunchSpec(argv=argv, env={**launch.program.env, **arm.env}, cwd=launch.workdir, ready_path="/health")

    @staticmethod
    def option_args(options: IkLlamaOptions) -> list[str]:
        args = cli_flags([(flag, getattr(options, field)) for field, flag in VALUE_OPTIONS])
        return args + [flag for field, flag in SWITCH_OPTIONS if getattr(options, field)]

    @staticmethod
    def spec_args(arm: Arm, draft: str | None = None) -> list[str]:
        """The fork's speculative flags: the method picks what is loaded, the knobs map one to one."""
        spec = arm.speculative
        if spec.method == "none":
            return ["--spec-type", "none", "-no-mtp"]
        if spec.method == "ngram":
            args = ["--spec-type", f"ngram-{spec.variant or 'mod'}"]
        elif spec.method == "mtp":
            args = ["-mtp"]
        else:  # draft: no --spec-type, or the n-gram kind would run before the draft model
            assert spec.draft_model is not None  # core refuses a draft arm without one
            args = ["-md", draft or spec.draft_model]
        knobs = SPECULATIVE[spec.method if spec.method != "ngram" else f"ngram/{spec.variant or 'mod'}"].knobs
        return args + cli_flags([(KNOB_FLAGS[k], getattr(spec, k)) for k in knobs])

    # -- read-back -----------------------------------------------------------------------

    # -- requests ------------------------------------------------------------------------
    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        return {"cache_prompt": False, "timings_per_token": True}





def nextn_layers(model: Path) -> int:
    """``<arch>.nextn_predict_layers`` of a GGUF (0 when absent): how many MTP layers it carries."""
    try:
        header = read_gguf_header(model)
        return header.count(f"{header.get('general.architecture')}.nextn_predict_layers") or 0
    except ValueError as exc:
        raise PreflightError(f"cannot read {model} as a GGUF: {exc}") from exc
