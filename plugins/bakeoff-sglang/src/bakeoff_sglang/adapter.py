"""SGLang (``python -m sglang.launch_server``) as a bakeoff engine, shipped as its own distribution.

It registers ``sglang`` in the ``bakeoff.engines`` entry-point group and imports nothing from bakeoff
but the public names of ``bakeoff.core``: the proof that a new engine needs no change to bakeoff.

SGLang facts it relies on (SGLang 0.5.x, read from its documentation, not captured from a running server; see
tests/fixtures/sglang/README.md):

- ``--speculative-algorithm``: NEXTN (the target's own MTP heads), EAGLE3, STANDALONE (a plain draft
  model), NGRAM, DFLASH; draft weights come from ``--speculative-draft-model-path``.
- ``--speculative-num-steps``, ``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens`` are
  set together or not at all. ``num-draft-tokens`` counts the verified root token, so a chain of n
  drafts is steps n, topk 1, draft tokens n + 1. DFLASH fixes steps and topk at 1 itself.
- A streamed chat response carries no speculative numbers (``return_meta_info`` is refused together
  with ``stream``). Per-request acceptance is therefore read from the ``Decode batch. … accept len: L``
  lines the server logs every ``--decode-log-interval`` decode steps while the request runs, and is
  flagged as an estimate. A response that does carry ``meta_info`` (``spec_verify_ct``) is used as is.
  Attached (no log), only the server's running average in ``/server_info`` exists, and is flagged so.
- ``/server_info`` (``/get_server_info`` in older versions) returns the server arguments, ``version``
  and ``internal_states[0].avg_spec_accept_length``; ``/metrics`` needs ``--enable-metrics``.
- The radix (prefix) cache would serve repeated prompts from cache, so it is off unless asked for.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx

from bakeoff.core import (
    Arm,
    Capabilities,
    ComposeImage,
    Effective,
    EngineAdapter,
    EngineLog,
    EngineUnavailable,
    LaunchInputs,
    LaunchSpec,
    MethodKnobs,
    PreflightError,
    Reader,
    ServerStats,
    engine_count,
    engine_object,
    engine_rate,
    engine_text,
    openai_model_id,
    sample_flag,
)

from .installer import SglangInstaller
from .options import IMAGE, SglangOptions

__all__ = [
    "ALGORITHMS",
    "IMAGE",
    "SglangAdapter",
    "SglangOptions",
    "estimate_from_log",
    "parse_decode_lines",
    "parse_meta_info",
]

# shared vocabulary -> --speculative-algorithm
ALGORITHMS = {"mtp": "NEXTN", "eagle3": "EAGLE3", "draft": "STANDALONE", "ngram": "NGRAM", "dflash": "DFLASH"}
CHAIN_METHODS = ("mtp", "eagle3", "draft")  # drafted step by step: steps / topk / draft tokens
CONTAINER_PORT = 30000
SETTING_FLAGS = {"ctx": "--context-length", "parallel": "--max-running-requests", "tensor_parallel": "--tp-size",
                 "kv_type": "--kv-cache-dtype", "dtype": "--dtype", "gpu_memory_utilization": "--mem-fraction-static"}

DECODE_RE = re.compile(r"Decode batch[.,].*?accept len: (?P<len>\d+(?:\.\d+)?)"
                       r"(?:, accept rate: (?P<rate>\d+(?:\.\d+)?))?")

# (reason, needles, advice) — first match wins; the matching log line is quoted in the error.
STARTUP_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("not-installed", ("No module named 'sglang'", "No module named sglang"),
     "the interpreter has no sglang; set options.python or $BAKEOFF_SGLANG_PYTHON"),
    ("out-of-memory", ("CUDA out of memory", "OutOfMemoryError", "Not enough memory"),
     "not enough GPU memory for the weights, KV pool or draft (lower settings.gpu_memory_utilization or ctx)"),
    ("no-gpu", ("Found no NVIDIA driver", "No CUDA GPUs are available"),
     "SGLang needs a GPU this machine does not have"),
    ("unknown-flag", ("unrecognized arguments", "invalid choice"),
     "this SGLang does not accept a flag bakeoff or extra_args passed"),
    ("port-in-use", ("Address already in use", "address already in use"), "the port is taken by another process"),
    ("model-load-failed", ("is not a local folder and is not a valid model identifier", "Error loading model",
                           "safetensors_rust.SafetensorError"),
     "SGLang could not load the model"),
)


def parse_decode_lines(log_text: str) -> list[dict[str, float | None]]:
    """Every ``Decode batch … accept len: L[, accept rate: R]`` in a log chunk, in order."""
    return [{"accept_len": float(m["len"]), "accept_rate": float(m["rate"]) if m["rate"] else None}
            for m in DECODE_RE.finditer(log_text)]


def parse_meta_info(meta: dict[str, Any], draft_tokens: int | None) -> ServerStats:
    """A response's ``meta_info``: exact per-request counts.

    SGLang counts verify steps (``spec_verify_ct``); the first token comes from prefill and every verify
    step yields its accepted drafts plus one token of its own, so accepted = completion − 1 − verify
    steps, and drafted = verify steps × (draft tokens − 1) when the draft tokens per step are known.
    """
    stats = ServerStats(source="meta_info")
    flags = stats.flags
    completion = engine_count(meta.get("completion_tokens"), "meta_info.completion_tokens", flags)
    stats.completion_tokens = completion
    stats.prompt_tokens = engine_count(meta.get("prompt_tokens"), "meta_info.prompt_tokens", flags)
    stats.cached_tokens = engine_count(meta.get("cached_tokens"), "meta_info.cached_tokens", flags)
    verify = engine_count(meta.get("spec_verify_ct"), "meta_info.spec_verify_ct", flags)
    if verify is not None and completion is not None:
        if verify > max(0, completion - 1):
            flags.append(sample_flag("bad-engine-value").line(
                f"meta_info.spec_verify_ct {verify} exceeds the {completion} tokens "
                f"generated after the first"))
        else:
            stats.drafts = verify
            stats.accepted = completion - 1 - verify if verify else 0
            stats.derived["accepted"] = "completion_tokens - 1 - spec_verify_ct (each verify step adds one token)"
            if draft_tokens:
                stats.drafted = verify * (draft_tokens - 1)
                stats.derived["drafted"] = "spec_verify_ct x (--speculative-num-draft-tokens - 1)"
            else:
                stats.unavailable["drafted"] = "SGLang reports verify steps, not drafted tokens, and the draft " \
                                               "length per step is not known"
    # steps that accepted 0, 1, 2, ... drafts (newer SGLang; core checks it against the step and token counts)
    histogram = meta.get("spec_accept_histogram", meta.get("spec_correct_drafts_histogram"))
    if isinstance(histogram, list) and histogram and all(engine_count(v, "meta_info.spec_accept_histogram[]", flags)
                                                         is not None for v in histogram):
        stats.accepted_histogram = [int(v) for v in histogram]
    else:
        stats.unavailable["accepted_histogram"] = "this SGLang's meta_info has no spec_accept_histogram"
    stats.unavailable["accepted_per_position"] = "SGLang reports no per-position acceptance"
    for key in ("spec_accept_length", "spec_accept_rate", "e2e_latency"):
        if engine_rate(meta.get(key), f"meta_info.{key}", flags) is not None:
            stats.extra[key] = meta[key]
    return stats


def estimate_from_log(lines: list[dict[str, float | None]], completion_tokens: int | None,
                      draft_tokens: int | None) -> ServerStats:
    """Per-request counts estimated from the request's decode log lines (each averages one log interval).

    With L the mean accept length (tokens per verify step: 1 to draft tokens) and N the completion tokens,
    the request took about (N − 1) / L verify steps. A line whose L is outside that range is flagged and
    left out: no verify step yields fewer than one token or more than it verified.
    """
    stats = ServerStats(source="log: Decode batch accept len (estimate)")
    ceiling = draft_tokens or float("inf")
    lengths = []
    for line in lines:
        value = line["accept_len"]
        if value is not None and 1.0 <= value <= ceiling:
            lengths.append(value)
        else:
            stats.flags.append(sample_flag("bad-engine-value").line(
                f"decode log accept len {value} outside 1..{ceiling:g}"))
    if not lengths:
        return stats
    mean_len = sum(lengths) / len(lengths)
    stats.extra["log_accept_len"] = round(mean_len, 4)
    rates = [line["accept_rate"] for line in lines if line["accept_rate"] is not None]
    if rates:
        stats.extra["log_accept_rate"] = round(sum(rates) / len(rates), 4)
    stats.flags.append(sample_flag("acceptance-estimated").line(
        f"from {len(lengths)} SGLang decode log line(s), not exact counts"))
    why = "a streamed SGLang response carries no meta_info; only the decode log's averages exist"
    stats.unavailable.update(accepted_per_position=why, accepted_histogram=why)
    stats.derived.update(drafts="estimate: (completion - 1) / mean accept length of the decode log lines",
                         accepted="estimate: completion - 1 - estimated draft steps")
    if completion_tokens and completion_tokens > 1:
        drafts = max(1, round((completion_tokens - 1) / mean_len))
        stats.drafts = drafts
        stats.accepted = max(0, completion_tokens - 1 - drafts)
        if draft_tokens:
            stats.drafted = drafts * (draft_tokens - 1)
    return stats


class SglangCompose(ComposeImage):
    """The pinned SGLang image (options.image) on all GPUs; a hub id is read from the Hugging Face cache mounted
    read-only (offline: the model must already be in it)."""

    def image_of(self, arm: Arm) -> str:
        return SglangAdapter().options(arm).image

    def hub_cache(self, arm: Arm) -> str | None:
        cache = SglangAdapter().options(arm).hf_cache
        return cache or os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")


def _speculation(info: dict[str, Any], flags: list[str]) -> tuple[str | None, int | None]:
    """The speculative algorithm /server_info names (None: none) and its draft tokens per verify step."""
    algorithm = engine_text(info.get("speculative_algorithm")) or None
    tokens = engine_count(info.get("speculative_num_draft_tokens"), "/server_info speculative_num_draft_tokens",
                          flags)
    return algorithm, tokens


class SglangReader(Reader):
    """SGLang's read-back: ``/server_info`` after start and after each request (the draft tokens per verify step,
    read again each time: the reader keeps nothing between calls), then ``meta_info``, the decode log lines or
    the server's running average per request."""

    def server_info(self, http: httpx.Client) -> dict[str, Any] | None:
        for path in ("/server_info", "/get_server_info"):
            try:
                response = http.get(path, timeout=10)
                if response.status_code == 200:
                    data = response.json()
                    return data if isinstance(data, dict) else None
            except (httpx.HTTPError, ValueError):
                return None
        return None

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        eff = Effective(model_id=openai_model_id(http))
        info = self.server_info(http)
        if info is None:
            eff.mismatches.append("could not read /server_info")
            return eff
        keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "speculative_draft_model_path", "context_length",
                "max_running_requests", "tp_size", "disable_radix_cache", "model_path")
        eff.raw = {k: info.get(k) for k in keys}
        eff.version = engine_text(info.get("version"))
        algorithm, _ = _speculation(info, eff.mismatches)
        eff.speculative, eff.spec_method = algorithm is not None, algorithm
        eff.context_tokens = engine_count(info.get("context_length"), "/server_info context_length", eff.mismatches)
        if arm.speculative.method in CHAIN_METHODS:  # n_max is the chain's draft steps
            eff.n_max = engine_count(info.get("speculative_num_steps"), "/server_info speculative_num_steps",
                                     eff.mismatches)
        eff.sources = {"speculative": ("/server_info", "speculative_algorithm"),
                       "spec_method": ("/server_info", "speculative_algorithm"),
                       "context_tokens": ("/server_info", "context_length"),
                       "n_max": ("/server_info", "speculative_num_steps")}
        return eff

    def engine_term(self, name: Literal["spec_method", "kv_type"], arm: Arm) -> str | None:
        """The --speculative-algorithm /server_info reports for the arm's method."""
        return ALGORITHMS.get(arm.speculative.method) if name == "spec_method" else None

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        final = final or {}
        info = self.server_info(http) or {}
        algorithm, draft_tokens = _speculation(info, [])  # a garbage value was flagged by the read-back
        meta = final.get("meta_info") or final.get("metadata")
        if isinstance(meta, dict) and "completion_tokens" in meta:
            return parse_meta_info(meta, draft_tokens)
        lines = parse_decode_lines(log.text())
        if lines:
            usage = engine_object(final.get("usage"))
            flags: list[str] = []
            stats = estimate_from_log(lines, engine_count(usage.get("completion_tokens"), "usage.completion_tokens",
                                                          flags), draft_tokens)
            stats.flags = flags + stats.flags
            return stats
        stats = ServerStats()
        if algorithm:  # attached, or no decode line fell inside this request
            states = info.get("internal_states")
            state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
            avg = engine_rate(state.get("avg_spec_accept_length"), "/server_info avg_spec_accept_length",
                              stats.flags)
            if avg is not None:
                stats.extra["server_avg_accept_length"] = avg
            stats.flags.append(sample_flag("acceptance-unavailable").line(
                "no per-request numbers (no meta_info, no decode log line); /server_info average recorded in extra"))
        return stats


class SglangAdapter(EngineAdapter[SglangOptions]):
    name = "sglang"
    description = "SGLang launch_server (Hugging Face models), native process or compose; plugin package"
    capabilities = Capabilities(
        # n_max is the draft steps of a chain (steps, topk 1, n_max + 1 draft tokens) and the tokens verified
        # per step for NGRAM and DFLASH (n_max + 1 draft tokens)
        speculative={
            "none": MethodKnobs(),
            "mtp": MethodKnobs(knobs=("n_max",), draft_model="optional"),  # NEXTN: the target's own heads
            "eagle3": MethodKnobs(knobs=("n_max",), draft_model="required"),
            "draft": MethodKnobs(knobs=("n_max",), draft_model="required"),
            "ngram": MethodKnobs(knobs=("n_max",)),
            "dflash": MethodKnobs(knobs=("n_max",), draft_model="required"),
        },
        settings=(*SETTING_FLAGS, "enforce_eager"),
        kv_types=("auto", "fp8_e5m2", "fp8_e4m3"),
        token_counts="usage_per_chunk",
        acceptance_source="meta_info.spec_verify_ct when a response carries it; otherwise the 'Decode batch … "
                          "accept len' log lines of the request (estimate); attached: /server_info average",
        launch_modes=("native", "compose"),
        docker_image=IMAGE,
        stateful_speculators=("ngram",),
        fixed_length_field="ignore_eos",
        thinking_field="chat_template_kwargs",
        build_options=("python", "image"),
    )
    display_name = "SGLang"
    startup_failures = STARTUP_FAILURES

    # -- before launch -----------------------------------------------------------------
    installer: ClassVar[SglangInstaller] = SglangInstaller()
    reader = SglangReader()
    compose: ClassVar[SglangCompose] = SglangCompose(
        IMAGE, CONTAINER_PORT, ("CMD", "python3", "-c", "import urllib.request; urllib.request.urlopen("
                                f"'http://127.0.0.1:{CONTAINER_PORT}/health', timeout=4)"),
        program=("python3", "-m", "sglang.launch_server"), extra={"shm_size": "16gb"})

    def model_ref(self, model: str) -> str:
        """A local path made absolute, or the string as given (a Hugging Face hub id)."""
        path = Path(model).expanduser()
        return str(path.resolve()) if path.exists() else model

    def preflight(self, arm: Arm) -> None:
        options = self.options(arm)
        spec = arm.speculative
        if options.eagle_topk is not None and spec.method not in CHAIN_METHODS:
            raise PreflightError(f"arm {arm.name!r}: options.eagle_topk applies to {', '.join(CHAIN_METHODS)} only")
        if spec.method in CHAIN_METHODS and spec.n_max is None and (options.eagle_topk or options.num_draft_tokens):
            raise PreflightError(f"arm {arm.name!r}: SGLang sets steps, topk and draft tokens together; set "
                                 f"speculative.n_max (draft steps) as well")
        if (options.eagle_topk or 1) > 1 and options.num_draft_tokens is None:
            raise PreflightError(f"arm {arm.name!r}: options.eagle_topk > 1 drafts a tree; set "
                                 f"options.num_draft_tokens (its size) too")
        if arm.launch == "native":
            python = self.installer.python(options)
            if python == sys.executable:
                if importlib.util.find_spec("sglang") is None:
                    raise EngineUnavailable(f"arm {arm.name!r}: sglang is not installed here; {self.installer.hint()}")
            elif not (Path(python).is_file() or shutil.which(python)):
                raise EngineUnavailable(f"arm {arm.name!r}: interpreter {python!r} not found; {self.installer.hint()}")

    # -- launch ------------------------------------------------------------------------
    def spec_args(self, arm: Arm, options: SglangOptions, draft_path: str | None) -> list[str]:
        """The speculative flags for an arm (none when speculation is off)."""
        spec = arm.speculative
        if not spec.enabled:
            return []
        args = ["--speculative-algorithm", ALGORITHMS[spec.method]]
        if draft_path:
            args += ["--speculative-draft-model-path", draft_path]
        draft_tokens = options.num_draft_tokens or (spec.n_max + 1 if spec.n_max else None)
        if spec.method in CHAIN_METHODS:
            if spec.n_max is None:
                return args  # SGLang picks its own defaults for all three (preflight refused a partial set)
            args += ["--speculative-num-steps", str(spec.n_max),
                     "--speculative-eagle-topk", str(options.eagle_topk or 1),
                     "--speculative-num-draft-tokens", str(draft_tokens)]
        elif draft_tokens is not None:  # NGRAM, DFLASH: only the number of tokens verified per step
            args += ["--speculative-num-draft-tokens", str(draft_tokens)]
        return args

    def server_args(self, arm: Arm, options: SglangOptions, model: str, draft: str | None, host: str,
                    port: int) -> list[str]:
        """launch_server arguments shared by the native and the compose launch."""
        s = arm.settings
        args = ["--model-path", model, "--host", host, "--port", str(port), "--enable-metrics",
                "--decode-log-interval", str(options.decode_log_interval)]
        if not options.radix_cache:
            args.append("--disable-radix-cache")
        for field, flag in SETTING_FLAGS.items():
            value = getattr(s, field)
            if value is not None:
                args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        if s.enforce_eager:
            args.append("--disable-cuda-graph")
        return args + self.spec_args(arm, options, draft) + list(arm.extra_args)

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        assert launch.program is not None  # core locates it for every native launch (resolve_launch)
        options = self.options(arm)
        argv = [*launch.program.argv, *self.server_args(arm, options, launch.model, launch.draft_model,
                                                        arm.settings.host, launch.port)]
        return LaunchSpec(argv=argv, env=dict(arm.env), ready_path="/health")

    # -- startup -----------------------------------------------------------------------

    # -- requests ----------------------------------------------------------------------


