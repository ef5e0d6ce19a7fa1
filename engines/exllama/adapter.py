"""ExLlamaV3 through TabbyAPI.

TabbyAPI is the OpenAI-compatible server for ExLlamaV3 (EXL3 or unquantized safetensors model
directories). Facts this adapter is built on (TabbyAPI e632af4 with exllamav3 1.4.2, read in its source
and seen on an H200; captures in tests/fixtures/exllama/):

- ``config.yml`` is read from the working directory, so bakeoff writes one per arm into the arm's run
  directory and starts ``main.py`` there. Every key has a flag too, but the file is what gets recorded.
- The start-up model loads *before* uvicorn listens: the first 200 from ``/health`` means loaded.
- Auth is on by default (it writes ``api_tokens.yml``); a launched engine binds loopback with auth off.
- Speculation is ``draft_model.draft_mode``: ``mtp`` (the main model's MTP layers), ``model`` (a draft
  directory; DFlash drafts load this way too) or ``ngram``; ``draft_num_tokens`` is n_max. Nothing in
  ``/v1/model`` shows it: the backend's model card has no draft entry.
- ``ignore_eos`` is an alias of ``ban_eos_token``; fixed length uses ``min_tokens``, and loop detection
  (``loop_detect_window``, 800 tokens by default) is switched off so a repetitive output is not cut.
- ``usage`` arrives once, at the end (no per-chunk usage), with extra timing fields
  (``prompt_time``, ``completion_time``, ``completion_tokens_per_sec`` …): the server's own figures.
  Under speculation one event carries several tokens, so the first event's token count is estimated.
- Acceptance: TabbyAPI after theroyallab/tabbyAPI PR #452 puts the request's draft counts in its usage
  (``usage.completion_tokens_details.accepted_prediction_tokens`` / ``rejected_prediction_tokens``, only while a
  draft runs; drafted = accepted + rejected) and the prefix cache's hit in ``usage.prompt_tokens_details
  .cached_tokens``. Those come first; the log line below is their second witness, and the only source on an
  older TabbyAPI (e632af4 has no such fields). The log has one line per request after its last token and before
  ``[DONE]``:
  ``Metrics (ID: <id>): N tokens generated in T seconds (…, Process: C cached tokens and P new tokens
  at X T/s, Generate: Y T/s, Context: L tokens, Draft: A / D tokens accepted (R%))``. The stream's
  ``id`` is ``chatcmpl-<id>``, which ties the line to its request. The console logger (rich) wraps at
  80 columns unless ``TABBY_LOG_CONSOLE_WIDTH`` is set, so it is set, and parsing tolerates wrapping.
  The line can also land a millisecond *after* ``[DONE]`` (seen once in 36 requests on the H200), so
  when the chunk read for a request lacks it, server_stats waits on the engine log core hands over
  (``EngineLog.wait_for``) for up to a second.
- Repeated prompts hit the prefix cache (no per-request switch); the log's cached count is recorded. No launch
  switch either: ExLlamaV3 reuses every cached page of an earlier prompt, so an agent session's turn needs no
  field, and its cached count is the Metrics line's (or usage.prompt_tokens_details.cached_tokens after PR #452).
- Structured outputs (router.py, backends/exllamav3/grammar.py): ``response_format`` json_schema becomes an
  LLGuidance grammar (OpenAI's ``{name, schema}`` is unwrapped; a schema it cannot parse is skipped with a log
  line, not refused); ``tools``/``tool_choice`` are taken, but tool calls are parsed out of the text only when
  config.yml sets ``model.tool_format``, so a tool_call workload without it is refused before launch.
- Counting quirks of exllamav3 1.4.2 (job.py), seen on the H200: ``usage.completion_tokens`` is one
  less than the tokens streamed (max_tokens 64 streams 64 tokens, usage says 63), and with drafting
  the job stops ``draft_num_tokens`` early (64 asked, 60 streamed). Neither is corrected here: core's
  ``fixed-length-missed`` flag shows both, and docs/exllama-h200.md explains them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
import yaml
from pydantic import BaseModel

from bakeoff.core import (
    Arm,
    Capabilities,
    ConfigError,
    Effective,
    EngineAdapter,
    EngineLog,
    EngineUnavailable,
    LaunchInputs,
    LaunchSpec,
    MethodKnobs,
    Missing,
    PrefixCache,
    PreflightError,
    Reader,
    ServerStats,
    StructuredOutputs,
    Workload,
    docker_run,
    engine_count,
    engine_object,
    engine_text,
    get_json,
    resolve_model,
    sample_flag,
)

from .installer import TabbyInstaller
from .options import DOCKER_IMAGE, ExllamaOptions

__all__ = ["ExllamaAdapter", "ExllamaOptions", "DRAFT_MODES", "MetricsLine", "parse_metrics_lines",
           "tabby_config", "cache_mode"]

CONTAINER_MODELS = "/app/models"
CONTAINER_DRAFTS = "/app/draft_models"
CONTAINER_PORT = 5000

# shared vocabulary -> TabbyAPI draft_model.draft_mode
DRAFT_MODES = {"mtp": "mtp", "draft": "model", "dflash": "model", "ngram": "ngram"}

# legacy names and llama.cpp-style names -> TabbyAPI cache_mode
_CACHE_ALIASES = {"fp16": "FP16", "f16": "FP16", "q8": "Q8", "q8_0": "Q8", "q6": "Q6", "q4": "Q4", "q4_0": "Q4"}
_KV_BITS = re.compile(r"^([2-8]),([2-8])$")

_METRICS_RE = re.compile(
    r"Metrics \(ID: (?P<id>[^)\s]+)\): (?P<gen>\d+) tokens generated in (?P<total>[\d.]+) seconds"
    r"(?: \((?P<items>.*?)\))?")
_QUEUE_RE = re.compile(r"Queue: (?P<queue>[\d.]+) s")
_PROCESS_RE = re.compile(r"Process: (?P<cached>[\d.]+) cached tokens and (?P<new>\d+) new tokens "
                         r"at (?P<pps>[\w.]+) T/s")
_GENERATE_RE = re.compile(r"Generate: (?P<gps>[\w.]+) T/s")
_CONTEXT_RE = re.compile(r"Context: (?P<ctx>\d+) tokens")
_DRAFT_RE = re.compile(r"Draft: (?P<accepted>\d+) / (?P<drafted>\d+) tokens accepted")
_LOG_PREFIX = re.compile(r"^\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\|\s*)?[A-Z]+:?\s*(?:\|\s*)?")

# (reason, needles, advice) — first match wins; the matching log line is quoted in the error.
STARTUP_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("missing-dependencies", ("Inference dependencies for TabbyAPI are not installed", "No module named"),
     "TabbyAPI's interpreter lacks torch, exllamav3 or one of TabbyAPI's own requirements"),
    ("exllamav3-too-old", ("TabbyAPI requires exllamav3",), "upgrade exllamav3 to what this TabbyAPI needs"),
    ("unsupported-gpu", ("unsupported GPU is found",), "ExLlamaV3 needs NVIDIA Ampere or newer"),
    ("missing-mtp-layers", ("component=\"mtp\"", "no MTP", "mtp component"),
     "draft_mode mtp needs a model whose EXL3 conversion kept its MTP layers"),
    ("bad-draft-config", ("Unknown exllamav3 draft mode", "ngram_match_min must be",
                          "Draft model is disabled because a model name"),
     "the draft_model section of config.yml does not describe a working draft"),
    ("out-of-memory", ("CUDA out of memory", "OutOfMemoryError", "Insufficient VRAM", "out of memory"),
     "not enough GPU memory for the model, its cache or the draft"),
    ("port-in-use", ("are in use by different services", "is currently in use. Switching to",
                     "address already in use"),
     "the port is taken by another process"),
    ("model-load-failed", ("FileNotFoundError", "No such file or directory", "Could not find model path",
                           "not a valid", "Traceback (most recent call last)"),
     "TabbyAPI could not load the model directory"),
)


class MetricsLine(BaseModel):
    """One ``Metrics (ID: …)`` line of the TabbyAPI log."""

    request_id: str
    gen_tokens: int
    total_s: float
    queue_s: float | None = None
    cached_tokens: int | None = None
    new_tokens: int | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    context_tokens: int | None = None
    accepted: int | None = None
    drafted: int | None = None


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:  # "Indeterminate"
        return None


def parse_metrics_lines(log_text: str) -> list[MetricsLine]:
    """Every ``Metrics (ID: …)`` line in a log chunk, also when the console wrapped it over lines."""
    flat = " ".join(_LOG_PREFIX.sub("", line).strip() for line in log_text.splitlines())
    flat = re.sub(r"\s+", " ", flat)
    out = []
    for m in _METRICS_RE.finditer(flat):
        line = MetricsLine(request_id=m["id"], gen_tokens=int(m["gen"]), total_s=float(m["total"]))
        items = m["items"] or ""
        if q := _QUEUE_RE.search(items):
            line.queue_s = float(q["queue"])
        if p := _PROCESS_RE.search(items):
            line.cached_tokens = round(float(p["cached"]))
            line.new_tokens = int(p["new"])
            line.prompt_tps = _num(p["pps"])
        if g := _GENERATE_RE.search(items):
            line.gen_tps = _num(g["gps"])
        if c := _CONTEXT_RE.search(items):
            line.context_tokens = int(c["ctx"])
        if d := _DRAFT_RE.search(items):
            line.accepted, line.drafted = int(d["accepted"]), int(d["drafted"])
        out.append(line)
    return out


def cache_mode(kv_type: str) -> str:
    """A bakeoff ``kv_type`` as TabbyAPI's ``cache_mode``.

    :raises ConfigError: not FP16, Q8/Q6/Q4 or 'k,v' bits 2-8.
    """
    value = kv_type.strip()
    if value.upper() in ("FP16", "Q8", "Q6", "Q4"):
        return value.upper()
    if value.lower() in _CACHE_ALIASES:
        return _CACHE_ALIASES[value.lower()]
    if _KV_BITS.match(value.replace(" ", "")):
        return value.replace(" ", "")
    raise ConfigError(f"kv_type {kv_type!r} is not a TabbyAPI cache_mode (FP16, Q8, Q6, Q4, or 'k,v' bits 2-8 "
                      f"such as '8,8' or '4,6')")


def _model_dir(value: str, what: str, arm: Arm) -> Path:
    path = resolve_model(value)
    if not path.is_dir():
        raise PreflightError(f"arm {arm.name!r}: {what} {str(path)!r} is not a directory; TabbyAPI loads model "
                             f"directories (EXL3 or unquantized safetensors with config.json), not single files")
    return path


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "config.json").read_text())
    except OSError as exc:
        raise PreflightError(f"{path}: no readable config.json ({exc.strerror})") from exc
    except ValueError as exc:
        raise PreflightError(f"{path}/config.json is not JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _is_dflash(config: dict[str, Any]) -> bool:
    names = [str(a).lower() for a in config.get("architectures") or []]
    return any("dflash" in n for n in names)


def _round_up(value: int, step: int = 256) -> int:
    return (value + step - 1) // step * step


def tabby_config(arm: Arm, options: ExllamaOptions, launch: LaunchInputs, *, docker: bool = False) -> dict[str, Any]:
    """The config.yml content for an arm (pure; paths are container paths under docker)."""
    s, spec, port = arm.settings, arm.speculative, launch.port
    model = Path(launch.model)
    model_section: dict[str, Any] = {
        "model_dir": CONTAINER_MODELS if docker else str(model.parent),
        "model_name": model.name,
        "backend": "exllamav3",
        "inline_model_loading": False,
        "max_batch_size": s.parallel or 1,
    }
    if s.ctx is not None:
        model_section["max_seq_len"] = s.ctx
        model_section["cache_size"] = options.cache_size or _round_up(s.ctx * (s.parallel or 1))
    elif options.cache_size is not None:
        model_section["cache_size"] = options.cache_size
    if s.kv_type is not None:
        model_section["cache_mode"] = cache_mode(s.kv_type)
    tp = (s.tensor_parallel or 1) > 1 or s.split == "tensor"
    model_section["tensor_parallel"] = tp
    if s.tensor_split:
        model_section["gpu_split_auto"] = False
        model_section["gpu_split"] = list(s.tensor_split)
    elif s.split == "none":
        model_section["gpu_split_auto"] = False
    for key in ("chunk_size", "tensor_parallel_backend", "autosplit_reserve"):
        if getattr(options, key) is not None:
            model_section[key] = getattr(options, key)

    draft: dict[str, Any] = {"draft_mode": "disabled"}
    if spec.enabled:
        draft = {"draft_mode": DRAFT_MODES[spec.method]}
        if launch.draft_model:
            d = Path(launch.draft_model)
            draft["draft_model_dir"] = CONTAINER_DRAFTS if docker else str(d.parent)
            draft["draft_model_name"] = d.name
        if spec.n_max is not None:
            draft["draft_num_tokens"] = spec.n_max
        if spec.lookup_min is not None:
            draft["ngram_match_min"] = spec.lookup_min
        draft["dynamic_draft"] = bool(options.dynamic_draft)
        if options.draft_cache_mode is not None:
            draft["draft_cache_mode"] = cache_mode(options.draft_cache_mode)

    config: dict[str, Any] = {
        "network": {"host": "0.0.0.0" if docker else s.host, "port": CONTAINER_PORT if docker else port,
                    "disable_auth": True, "api_servers": ["oai"]},
        "logging": {"log_prompt": False, "log_generation_params": False, "log_requests": False},
        "model": model_section,
        "draft_model": draft,
    }
    for section, values in options.config.items():
        config.setdefault(section, {}).update(values)
    return config


class ExllamaPrefixCache(PrefixCache):
    """TabbyAPI (e632af4) has no prefix-cache switch, per request or at launch: ExLlamaV3's generator reuses every
    cached page (256 tokens, and a partial last page) of an earlier prompt, always. A sessions workload needs no
    field; what it needs is a cache that holds a whole session, so a cache_size smaller than the arm's context is
    refused (turns would evict the prefix they reuse, and read as misses)."""

    def problem(self, arm: Arm) -> str | None:
        options = ExllamaOptions.model_validate(arm.options)
        ctx = arm.settings.ctx
        if arm.attached or options.cache_size is None or ctx is None or options.cache_size >= ctx:
            return None
        return (f"options.cache_size {options.cache_size} is smaller than settings.ctx {ctx}: a session's turns "
                "would evict the prefix the next turn reuses; leave cache_size out or raise it")


@dataclass(frozen=True)
class ExllamaStructured(StructuredOutputs):
    """``response_format`` json_schema is decoded under an LLGuidance grammar (TabbyAPI unwraps OpenAI's named
    schema); tools and ``tool_choice`` are taken, but a tool call is parsed out of the answer only when config.yml
    names the model's tool format (``model.tool_format``); without it every answer is text."""

    def problem(self, arm: Arm, kinds: Sequence[str]) -> str | None:
        if "tool_call" not in kinds or arm.attached:
            return None
        options = ExllamaOptions.model_validate(arm.options)
        if options.config.get("model", {}).get("tool_format"):
            return None
        return ("TabbyAPI parses tool calls only with model.tool_format set (e.g. qwen3_coder, mistral): add "
                "options.config: {model: {tool_format: NAME}} for the model's format, or leave tool_call out of "
                "workload.structured.kinds")


class ExllamaReader(Reader):
    """TabbyAPI's read-back: ``/v1/model`` and ``/props`` after start; usage (with PR #452's draft and cache
    counts) and the request's ``Metrics`` log line, matched by stream id, per request."""

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        eff = Effective()
        problems: list[str] = []
        card = get_json(http, "/v1/model", dict, problems)
        props = get_json(http, "/props", dict, problems) or {}
        eff.mismatches += problems
        if card is None:
            return eff
        params = engine_object(card.get("parameters"))
        gen = engine_object(props.get("default_generation_settings"))
        flags = eff.mismatches
        eff.model_id = engine_text(card.get("id"))
        eff.raw = {"max_seq_len": engine_count(params.get("max_seq_len"), "/v1/model max_seq_len", flags),
                   "cache_size": engine_count(params.get("cache_size"), "/v1/model cache_size", flags),
                   "cache_mode": engine_text(params.get("cache_mode")),
                   "max_batch_size": engine_count(params.get("max_batch_size"), "/v1/model max_batch_size", flags),
                   "chunk_size": engine_count(params.get("chunk_size"), "/v1/model chunk_size", flags),
                   "prompt_template": engine_text(params.get("prompt_template")),
                   "draft": params.get("draft") if isinstance(params.get("draft"), dict) else None,
                   "total_slots": engine_count(props.get("total_slots"), "/props total_slots", flags),
                   "n_ctx": engine_count(gen.get("n_ctx"), "/props n_ctx", flags),
                   "owned_by": engine_text(card.get("owned_by"))}
        raw = eff.raw
        ctx = ("/v1/model", "max_seq_len") if raw["max_seq_len"] is not None else ("/props", "n_ctx")
        slots = ("/props", "total_slots") if raw["total_slots"] is not None else ("/v1/model", "max_batch_size")
        eff.context_tokens, eff.slots, eff.kv_type = raw[ctx[1]], raw[slots[1]], raw["cache_mode"]
        eff.speculative = True if raw["draft"] else None  # a card without a draft does not prove it is off
        eff.sources = {"context_tokens": ctx, "slots": slots, "speculative": ("/v1/model", "draft"),
                       "kv_type": ("/v1/model", "cache_mode")}
        eff.notes = {"context_tokens": f"limited by cache_size {raw['cache_size']}"}
        if raw["prompt_template"] is None and not arm.attached:
            eff.mismatches.append("/v1/model shows no prompt template: TabbyAPI refuses chat completions")
        return eff

    def engine_term(self, name: Literal["spec_method", "kv_type"], arm: Arm) -> str | None:
        """The cache_mode /v1/model reports for the arm's kv_type (its speculative method is not read back)."""
        return cache_mode(arm.settings.kv_type) if name == "kv_type" and arm.settings.kv_type else None

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        stats = ServerStats(source="usage + log")
        flags = stats.flags
        usage = (final or {}).get("usage")
        own: tuple[int, int] | None = None  # (accepted, drafted) from usage (PR #452)
        if isinstance(usage, dict) and usage:
            stats.completion_tokens = engine_count(usage.get("completion_tokens"), "usage.completion_tokens", flags)
            stats.prompt_tokens = engine_count(usage.get("prompt_tokens"), "usage.prompt_tokens", flags)
            stats.decode_tps = _as_float(usage.get("completion_tokens_per_sec"))  # "Indeterminate" when too fast
            stats.prefill_tps = _as_float(usage.get("prompt_tokens_per_sec"))
            stats.extra.update({k: v for k in ("prompt_time", "completion_time", "total_time")
                                if (v := _as_float(usage.get(k))) is not None})
            own = _usage_acceptance(usage, flags)
        else:
            flags.append(sample_flag("server-usage-missing").line())
        if own is not None:
            stats.accepted, stats.drafted = own
            stats.source = "usage: completion_tokens_details accepted/rejected_prediction_tokens"
            stats.unavailable.update(dict.fromkeys(NO_DRAFT_STEPS, "TabbyAPI reports only the request's accepted "
                                                   "and rejected draft totals, not its draft steps"))
        request_id = _request_id(final)
        lines = parse_metrics_lines(log.text())
        mine = [m for m in lines if request_id is not None and m.request_id == request_id]
        if not mine and request_id is None and len(lines) == 1:
            mine = lines  # no stream id to match on; one line in the chunk is this request's
        if not mine and request_id is not None and log.followed:
            def found(text: str) -> bool:
                return any(m.request_id == request_id for m in parse_metrics_lines(text))

            mine = [m for m in parse_metrics_lines(log.wait_for(found)) if m.request_id == request_id]
            if mine:
                stats.extra["metrics_log"] = "late"
        if not mine:
            stats.flags.append(sample_flag("metrics-log-missing").line())
            if own is not None and own[1]:  # usage's counts stand, unwitnessed
                stats.flags.append(sample_flag("acceptance-crosscheck-missing").line(
                    "no Metrics log line for this request"))
            return stats
        m = mine[-1]
        stats.extra.update({"request_id": m.request_id, "log_total_s": m.total_s, "log_queue_s": m.queue_s,
                            "log_gen_tps": m.gen_tps, "log_context_tokens": m.context_tokens})
        if m.new_tokens is not None:
            stats.prompt_tokens = m.new_tokens  # uncached tokens actually processed
            stats.cached_tokens = m.cached_tokens
            cached = _usage_cached(usage, flags)
            if cached is not None and m.cached_tokens is not None and cached != m.cached_tokens:
                stats.flags.append(sample_flag("cache-count-mismatch").line(
                    f"usage.prompt_tokens_details.cached_tokens {cached}, "
                    f"log {m.cached_tokens}"))
            if m.cached_tokens:
                stats.flags.append(sample_flag("prompt-cache-hit").line(f"{m.cached_tokens} cached tokens"))
        if stats.completion_tokens is not None and m.gen_tokens != stats.completion_tokens:
            stats.flags.append(sample_flag("log-count-mismatch").line(
                f"log {m.gen_tokens}, usage {stats.completion_tokens}"))
        if m.drafted is not None and own is not None:  # the log witnesses usage's counts
            if (m.accepted, m.drafted) != own:
                stats.flags.append(sample_flag("acceptance-log-mismatch").line(f"log {m.accepted}/{m.drafted} vs usage "
                                   f"{own[0]}/{own[1]} (accepted/drafted)"))
        elif m.drafted is not None:
            stats.drafted, stats.accepted = m.drafted, m.accepted
            stats.source = "log: Draft: A / D tokens accepted"
            # the line is all TabbyAPI says about drafting: no step count, no positions (drafted tokens per
            # step vary, e.g. 220 and 221 over 251 tokens on the H200, so steps are not drafted / n_max)
            why = "TabbyAPI logs only the request's accepted / drafted totals, not its draft steps"
            stats.unavailable.update(dict.fromkeys(NO_DRAFT_STEPS, why))
        elif own is not None and own[1]:
            stats.flags.append(sample_flag("acceptance-crosscheck-missing").line(
                "usage has draft counts, the Metrics log line none"))
        else:
            stats.extra["draft_in_log"] = False  # TabbyAPI logs Draft: only when drafting is configured
        return stats


class ExllamaAdapter(EngineAdapter[ExllamaOptions]):
    name = "exllama"
    description = "ExLlamaV3 through TabbyAPI (EXL3 model directories), native checkout or docker"
    capabilities = Capabilities(
        speculative={  # draft_num_tokens is n_max; ngram_match_min is lookup_min (TabbyAPI config.yml)
            "none": MethodKnobs(),
            "mtp": MethodKnobs(knobs=("n_max",)),  # the main model's own MTP layers
            "draft": MethodKnobs(knobs=("n_max",), draft_model="required"),
            "dflash": MethodKnobs(knobs=("n_max",), draft_model="required"),
            "ngram": MethodKnobs(knobs=("n_max", "lookup_min")),
        },
        settings=("ctx", "parallel", "kv_type", "tensor_parallel", "tensor_split", "split"),
        split_modes=("none", "layer", "tensor"),
        token_counts="final_usage_only",
        acceptance_source="usage.completion_tokens_details accepted/rejected_prediction_tokens (TabbyAPI PR #452), "
                          "cross-checked with the log line 'Draft: A / D tokens accepted' matched by stream id; "
                          "the log line alone on older TabbyAPI",
        launch_modes=("native", "docker"),
        docker_image=DOCKER_IMAGE,
        stateful_speculators=(),
        fixed_length_field="min_tokens",
        thinking_field="chat_template_kwargs",
        build_options=("tabby_dir", "python", "docker_image"),
    )
    display_name = "TabbyAPI"
    startup_failures = STARTUP_FAILURES

    installer: ClassVar[TabbyInstaller] = TabbyInstaller()
    reader = ExllamaReader()
    prefix_cache = ExllamaPrefixCache()
    structured = ExllamaStructured(kinds=("json_schema", "tool_call"))

    def missing(self, arm: Arm) -> list[Missing]:
        if arm.launch != "native":
            return []
        try:
            self.installer.locate(self.options(arm))
        except EngineUnavailable as exc:
            return [Missing(str(exc).split(". ")[0].removeprefix("exllama: "),
                            "clone TabbyAPI with exllamav3 and set options.tabby_dir (or $BAKEOFF_TABBY_DIR); "
                            "docs/exllama-h200.md")]
        return []

    # -- preflight -----------------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        options = self.options(arm)
        spec, s = arm.speculative, arm.settings
        if arm.launch == "native":
            self.installer.locate(options)
        model = _model_dir(arm.launched_model, "model", arm)
        target = _read_config(model)
        if spec.method == "mtp":
            declared = [target[k] for k in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
                        if k in target]
            if declared and not any(declared):
                raise PreflightError(f"arm {arm.name!r}: MTP needs a model with MTP layers, but {model.name}'s "
                                     f"config.json declares none")
        if spec.draft_model:
            draft = _read_config(_model_dir(spec.draft_model, "draft_model", arm))
            if spec.method == "dflash" and not _is_dflash(draft):
                raise PreflightError(f"arm {arm.name!r}: draft {spec.draft_model!r} is not a DFlash model "
                                     f"(architectures {draft.get('architectures')})")
            if spec.method == "draft" and _is_dflash(draft):
                raise PreflightError(f"arm {arm.name!r}: draft {spec.draft_model!r} is a DFlash model; use "
                                     f"method 'dflash' so the arm is labelled for what runs")
        for what, value in (("settings.kv_type", s.kv_type), ("options.draft_cache_mode", options.draft_cache_mode)):
            try:
                if value is not None:
                    cache_mode(value)
            except ConfigError as exc:
                raise PreflightError(f"arm {arm.name!r}: {what}: {exc}") from exc
        tp = s.tensor_parallel or 1
        if s.tensor_split and tp > 1 and len(s.tensor_split) != tp:
            raise PreflightError(f"arm {arm.name!r}: tensor_parallel {tp} but tensor_split lists "
                                 f"{len(s.tensor_split)} GPUs (TabbyAPI splits over the GPUs gpu_split names)")
        if s.split == "tensor" and s.tensor_parallel == 1:
            raise PreflightError(f"arm {arm.name!r}: split 'tensor' with tensor_parallel 1 is contradictory")

    # -- launch --------------------------------------------------------------------------
    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        options = self.options(arm)
        docker = arm.launch == "docker"
        config = tabby_config(arm, options, launch, docker=docker)
        files = {"config.yml": "# written by bakeoff for arm " + arm.name + "\n"
                               + yaml.safe_dump(config, sort_keys=False)}
        env = {"TABBY_LOG_CONSOLE_WIDTH": "100000", "PYTHONUNBUFFERED": "1", **arm.env}
        if docker:
            argv = self.docker_argv(arm, options, launch)
        else:
            assert launch.program is not None  # core locates it for every native launch (resolve_launch)
            argv = [*launch.program.argv, *arm.extra_args]
        container = argv[argv.index("--name") + 1] if docker else None
        return LaunchSpec(argv=argv, env=env, cwd=launch.workdir, ready_path="/health", files=files,
                          container=container)

    def docker_argv(self, arm: Arm, options: ExllamaOptions, launch: LaunchInputs) -> list[str]:
        """``docker run`` for the TabbyAPI image: loopback port, models read-only, our config.yml."""
        port = launch.port
        name = f"bakeoff-{arm.name}-{port}".replace("+", "-")
        volumes = [(str(Path(launch.model).parent), CONTAINER_MODELS, True),
                   (str(launch.workdir / "config.yml"), "/app/config.yml", True)]
        if launch.draft_model:
            volumes.append((str(Path(launch.draft_model).parent), CONTAINER_DRAFTS, True))
        return docker_run(name, options.docker_image, arm.settings.host, port, CONTAINER_PORT, volumes=volumes,
                          env_names=arm.env, command=["main.py", *arm.extra_args],
                          flags=["--gpus", "all", "--shm-size", "8g",
                                 "-e", "TABBY_LOG_CONSOLE_WIDTH=100000", "-e", "PYTHONUNBUFFERED=1"])

    # -- startup -------------------------------------------------------------------------
    def is_ready(self, response: httpx.Response) -> bool:
        return response.status_code == 200  # uvicorn listens only after the model loaded

    # -- requests ------------------------------------------------------------------------

    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        options = self.options(arm)
        # min_tokens is set by core to each request's own max_tokens (fixed_length_field): TabbyAPI rejects
        # min_tokens > max_tokens with a 500 (the untimed warm-up shortens max_tokens).
        fields: dict[str, Any] = {}
        window = options.loop_detect_window
        if window is None and workload.fixed_length:
            window = 0
        if window is not None:
            fields["loop_detect_window"] = window
        return fields



NO_DRAFT_STEPS = ("drafts", "mean_accepted_len", "accepted_per_position", "acceptance_per_position",
                  "accepted_histogram")


def _usage_acceptance(usage: dict[str, Any], flags: list[str]) -> tuple[int, int] | None:
    """(accepted, drafted) from usage.completion_tokens_details (PR #452), or None when usage has no draft counts
    (no draft running, or a TabbyAPI before that change). A value that is not a count is flagged and dropped."""
    details = engine_object(usage.get("completion_tokens_details"))
    if "accepted_prediction_tokens" not in details and "rejected_prediction_tokens" not in details:
        return None
    accepted = engine_count(details.get("accepted_prediction_tokens"),
                            "usage.completion_tokens_details.accepted_prediction_tokens", flags)
    rejected = engine_count(details.get("rejected_prediction_tokens"),
                            "usage.completion_tokens_details.rejected_prediction_tokens", flags)
    return None if accepted is None or rejected is None else (accepted, accepted + rejected)


def _usage_cached(usage: Any, flags: list[str]) -> int | None:
    details = engine_object(usage.get("prompt_tokens_details")) if isinstance(usage, dict) else {}
    if "cached_tokens" not in details:
        return None
    return engine_count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens", flags)


def _as_float(value: Any) -> float | None:
    """A number TabbyAPI reports, or None (it writes "Indeterminate" when a phase was too short to time)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def _request_id(final: dict[str, Any] | None) -> str | None:
    sid = (final or {}).get("id")
    if not isinstance(sid, str) or not sid:
        return None
    return sid.removeprefix("chatcmpl-")
