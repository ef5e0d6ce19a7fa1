"""llama.cpp ``llama-server`` adapter.

Facts this adapter is built on (llama.cpp b11434, checked on a real server):

- ``--spec-type`` is always passed explicitly: ``-md`` alone loads a plain or EAGLE3 draft and then
  runs *without* speculation; draft-dflash/eagle3/dspark without ``-md`` start fine with no speculation.
- The server answers 503 "Loading model" until the model is loaded, then 200.
- Auto ``-np`` means 4 unified slots and ``--fit`` may shrink the context, so bakeoff pins ``-np 1``
  unless told otherwise and reads ``/props`` back.
- One token per SSE event, even under speculation; ``timings.draft_n``/``draft_n_accepted`` exist only
  when drafts were made (absent means "drafted nothing"), and each request logs
  ``draft acceptance = R (  A accepted /   G generated), mean len = L``.
- Draft steps and accepted tokens per draft position are only in ``/metrics`` (counters added when a
  request ends: ``spec_decode_num_drafts_total``, ``spec_decode_num_accepted_tokens_per_pos_total``), so
  they are per request only one request at a time. Per-step lines (``accepted N/M draft tokens``) need
  ``-lv 4`` or ``LLAMA_TRACE``, which log every step; bakeoff does not need them: the histogram of
  accepted drafts follows exactly from the per-position counters (core/analysis/acceptance.py).
- ``predicted_per_second = (predicted_n - 1) / predicted_ms``: the same window as bakeoff's decode rate.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable
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
    Missing,
    PrefixCache,
    PreflightError,
    Reader,
    ReferenceBench,
    Selftest,
    SelftestCase,
    ServerStats,
    StructuredOutputs,
    Witness,
    Workload,
    counter_delta,
    engine_count,
    engine_rate,
    engine_text,
    first_matching_line,
    get_json,
    openai_model_id,
    position_deltas,
    resolve_model,
    sample_flag,
    scrape,
)
from bakeoff.core import cli_flags as _flags

from .installer import LlamaCppInstaller
from .options import LlamaCppOptions
from .spec import DEFAULT_VARIANTS, SPEC_TYPES, SPECULATIVE, spec_args, spec_type

__all__ = ["LlamaCppAdapter", "LlamaCppOptions", "SPEC_TYPES", "parse_acceptance_lines", "split_modes_of"]

# launch: compose — ggml-org's server images at the build bakeoff compiles natively (compose/ pins the same)
COMPOSE_IMAGE_CPU = "ghcr.io/ggml-org/llama.cpp:server-b11434"
COMPOSE_IMAGE_CUDA = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11434"
COMPOSE_PORT = 8080

M_DRAFTS, M_ACCEPTED = "llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_accepted_tokens_total"
# One counter per draft position (n_max of them), added when a request ends; the server has it once any
# request has drafted. Not in the response's timings and, at the default verbosity, not in the log.
M_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
# Where llama-server says how many tokens it drafts per step (b11434: /slots and /props do not; their
# "speculative.n_max" field is compiled out). DFlash and DSpark log it at startup, then a warning when the
# draft's trained block size clamps it (common/speculative.cpp); after any draft, /metrics has one
# per-position counter per draft token (the running n_max, clamp included). Other methods log it only at
# trace verbosity.
N_MAX_LOG_RE = re.compile(r"common_speculative_impl_\w+: - n_max=(\d+)")
PROBE_TOKENS = 8  # the read-back's one request: enough for a draft step, short enough to cost well under a second
N_MAX_CLAMP_RE = re.compile(r"exceeds the trained block size \d+ -- clamping to (\d+)")
NO_OWN_METRICS = "concurrent streams share /metrics, so draft steps and per-position counts are not per request"
# A CPU-only build (or a GPU build without a usable GPU) says so once at startup and then runs on the CPU.
CPU_ONLY_LINES = ("no usable GPU found", "--gpu-layers option will be ignored", "not compiled with GPU offload support")
OFFLOAD_RE = re.compile(r"offloaded (?P<done>\d+)/(?P<total>\d+) layers to GPU")

ACCEPTANCE_RE = re.compile(
    r"draft acceptance = (?P<rate>[\d.]+) \(\s*(?P<accepted>\d+) accepted /\s*(?P<generated>\d+) generated\)"
    r"(?:, mean len =\s*(?P<mean>[\d.]+))?")

# (reason, needles, advice) — first match wins; the matching log line is quoted in the error.
STARTUP_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # Argument errors come first: llama-server prints them (plus usage text) before loading anything.
    ("unknown-flag", ("error: invalid argument", "error while handling argument", "unknown speculative type"),
     "this llama-server does not accept a flag bakeoff or extra_args passed"),
    ("missing-mtp-layers", ("doesn't contain MTP layers", "failed to create MTP context"),
     "the model has no MTP (NextN) layers; use a GGUF converted with its MTP heads"),
    ("incompatible-draft-vocab", ("vocabs are not compatible", "vocab type must match"),
     "the draft model's vocabulary does not match the target's"),
    ("bad-draft-model", ("has no target_layer_ids", "is not eagle3", "has no confidence head",
                         "failed to load draft model", "failed to initialize speculative decoding"),
     "the draft model does not fit the requested speculative type"),
    ("out-of-memory", ("out of memory", "failed to allocate", "unable to allocate", "failed to fit params"),
     "not enough memory for the model, context or KV cache"),
    ("port-in-use", ("couldn't bind", "Address already in use", "address already in use"),
     "the port is taken by another process"),
    ("model-load-failed", ("failed to load model", "error loading model", "exiting due to model loading error"),
     "llama-server could not load the model"),
)


def parse_acceptance_lines(log_text: str) -> list[dict[str, float]]:
    """Every ``draft acceptance = …`` line in a log chunk, as numbers."""
    out = []
    for m in ACCEPTANCE_RE.finditer(log_text):
        out.append({"rate": float(m["rate"]), "accepted": int(m["accepted"]), "generated": int(m["generated"]),
                    "mean_len": float(m["mean"]) if m["mean"] else 0.0})
    return out


INSTALLER = LlamaCppInstaller()


def binary_record(arm: Arm) -> dict[str, Any]:
    """What run.json says about the binary of a native arm: path, where it was found, backend and build flags."""
    options = LlamaCppOptions.model_validate(arm.options)
    return INSTALLER.binary_record(options.binary, options.build_version)


class LlamaCppReader(Reader):
    """llama-server's read-back: ``/props`` and ``/slots`` after start, ``timings`` per chunk and per response,
    ``/metrics`` deltas and the per-request ``draft acceptance`` log line as cross-checks."""

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        """``/props`` (context per slot, slots, build) and ``/slots`` (whether speculation is on, and once a
        request has run, the speculative types the slot uses). ``/props``'s own ``speculative.types`` is the
        default of a *request*, "none" even on a speculating server, so it is not read."""
        unread: list[str] = []  # why no model id, if none: a note, not a settings mismatch
        eff = Effective(model_id=openai_model_id(http, problems=unread))
        if unread:
            eff.notes["model_id"] = unread[0]
        problems: list[str] = []
        props = get_json(http, "/props", dict, problems) or {}
        slots = get_json(http, "/slots", list, problems)
        gen = props.get("default_generation_settings")
        gen = gen if isinstance(gen, dict) else {}
        flags: list[str] = []
        n_ctx = engine_count(gen.get("n_ctx"), "/props default_generation_settings.n_ctx", flags)
        total_slots = engine_count(props.get("total_slots"), "/props total_slots", flags)
        slot = slots[0] if slots and isinstance(slots[0], dict) else None
        if slots is not None and slot is None:
            flags.append(sample_flag("bad-engine-value").line(f"/slots is {str(slots)[:40]}, not a list of slots"))
        speculative = slot.get("speculative") if slot is not None else None
        if speculative is not None and not isinstance(speculative, bool):
            flags.append(sample_flag("bad-engine-value").line(
                f"/slots[0].speculative is {speculative!r:.40}, not true/false"))
            speculative = None
        if speculative and slot is not None and "params" not in slot:
            slot = self._slot_after_probe(http, problems) or slot
        params = slot.get("params") if slot is not None else None
        spec_types = engine_text(params.get("speculative.types")) if isinstance(params, dict) else None
        eff.mismatches += problems + flags
        if speculative is None:
            eff.mismatches.append("/slots does not say whether speculation is on")
        eff.version = engine_text(props.get("build_info"))
        eff.context_tokens, eff.slots, eff.speculative, eff.spec_method = n_ctx, total_slots, speculative, spec_types
        eff.sources = {"context_tokens": ("/props", "n_ctx"), "slots": ("/props", "total_slots"),
                       "speculative": ("/slots", "speculative"), "spec_method": ("/slots", "speculative.types")}
        eff.notes = {"context_tokens": "--fit or slots"}
        eff.raw = {"n_ctx_per_slot": n_ctx, "total_slots": total_slots, "speculative": speculative,
                   "spec_types": spec_types, "model_path": engine_text(props.get("model_path")),
                   "build_info": eff.version}
        if speculative:
            self._read_n_max(http, log.text(), eff)
        if arm.launch == "native" and not arm.attached:
            eff.raw["binary"] = binary_record(arm)
        return eff

    def _read_n_max(self, http: httpx.Client, log_text: str, eff: Effective) -> None:
        """The draft size the server runs with: its startup log (clamp included), else the number of
        per-position counters once it has drafted."""
        clamped = N_MAX_CLAMP_RE.findall(log_text)
        logged = clamped or N_MAX_LOG_RE.findall(log_text)
        if logged:
            eff.n_max = max(int(n) for n in logged)
            eff.sources["n_max"] = ("the startup log", "n_max")
            if clamped:
                eff.notes["n_max"] = "clamped to the draft model's trained block size"
        else:
            positions = {dict(labels).get("position") for name, labels in scrape(http) or {} if name == M_PER_POS}
            if positions:
                eff.n_max = len(positions)
                eff.sources["n_max"] = ("/metrics", "draft positions (spec_decode_num_accepted_tokens_per_pos_total)")
        eff.raw["n_max"] = eff.n_max

    def engine_term(self, name: Literal["spec_method", "kv_type"], arm: Arm) -> str | None:
        """The ``--spec-type`` /slots lists (its KV type is not read back)."""
        return spec_type(arm) if name == "spec_method" else None

    def log_mismatches(self, arm: Arm, log_text: str) -> list[str]:
        """GPU layers asked but the engine on the CPU (a CPU-only build, or no usable GPU), or only part of
        the model offloaded; plus the engine-neutral multi-GPU traps."""
        out = super().log_mismatches(arm, log_text)
        asked = arm.settings.gpu_layers
        if asked in (None, 0) or arm.attached:
            return out
        cpu_line = first_matching_line(log_text, CPU_ONLY_LINES)
        if cpu_line:
            out.append(f"settings.gpu_layers {asked} asked, but llama-server runs on the CPU: {cpu_line}")
        elif arm.launch == "native":
            backend = binary_record(arm).get("backend")
            if backend == "cpu":
                out.append(f"settings.gpu_layers {asked} asked, but this llama-server is a CPU-only build")
        offload = OFFLOAD_RE.search(log_text)
        if offload and not cpu_line:
            done, total = int(offload["done"]), int(offload["total"])
            wanted = total if asked in ("all", "auto") or int(asked) >= total else int(asked)
            if done < wanted:
                out.append(f"settings.gpu_layers {asked} asked, but only {done} of {total} layers were offloaded "
                           f"to the GPU: {offload[0].strip()}")
        return out

    def _slot_after_probe(self, http: httpx.Client, problems: list[str]) -> dict[str, Any] | None:
        """Slot 0 after a short request: a fresh slot shows no params, and its ``speculative.types`` are what
        the server really speculates with (the only place they are reported). A few tokens, so a draft method
        drafts once and /metrics gets its per-position counters (n_max of them)."""
        try:
            http.post("/completion", json={"prompt": "Count from one to ten:", "n_predict": PROBE_TOKENS,
                                           "cache_prompt": False}, timeout=60).raise_for_status()
        except httpx.HTTPError as exc:
            problems.append(f"could not read the speculative types: a {PROBE_TOKENS}-token /completion failed: "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            return None
        slots = get_json(http, "/slots", list, problems)
        return slots[0] if slots and isinstance(slots[0], dict) else None

    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        """Chat-template + tokenize exactly as /v1/chat/completions does (add_special and parse_special on).

        ``/v1/chat/completions/input_tokens`` does both in one call; builds without it get
        ``/apply-template`` then ``/tokenize``.
        """
        from bakeoff.core import MeasurementError

        body: dict[str, Any] = {"messages": messages}
        if template_kwargs is not None:
            body["chat_template_kwargs"] = template_kwargs
        try:
            r = http.post("/v1/chat/completions/input_tokens", json=body, timeout=60)
            answer = r.json() if r.status_code == 200 else None
            if isinstance(answer, dict) and engine_count(answer.get("input_tokens"), "input_tokens", []):
                return int(answer["input_tokens"])
            r = http.post("/apply-template", json=body, timeout=60)
            r.raise_for_status()
            r = http.post("/tokenize", json={"content": r.json()["prompt"], "add_special": True,
                                             "parse_special": True}, timeout=60)
            r.raise_for_status()
            tokens = r.json()["tokens"]
            if not isinstance(tokens, list):
                raise TypeError(f"/tokenize 'tokens' is {str(tokens)[:40]}, not a list")
            return len(tokens)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MeasurementError(f"llama-server could not count prompt tokens: {exc}") from exc

    def chunk_token_count(self, payload: dict[str, Any]) -> object:
        timings = payload.get("timings")
        if isinstance(timings, dict) and "predicted_n" in timings:
            return timings["predicted_n"]  # raw: the client validates it
        return super().chunk_token_count(payload)

    def before_request(self, http: httpx.Client) -> Any:
        return {"metrics": scrape(http)}  # a dict: "the scrape failed" differs from "no snapshot taken"

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        """Counts and rates from the response's ``timings``, cross-checked with ``/metrics`` deltas and the
        request's ``draft acceptance`` log line. A cross-check that could not run says so in the flags:
        ``metrics-unavailable``, ``log-missing``, ``acceptance-crosscheck-missing``."""
        stats = ServerStats(source="timings")
        flags = stats.flags
        timings = (final or {}).get("timings")
        if isinstance(timings, dict) and timings:
            stats.completion_tokens = engine_count(timings.get("predicted_n"), "timings.predicted_n", flags)
            stats.prompt_tokens = engine_count(timings.get("prompt_n"), "timings.prompt_n", flags)
            stats.cached_tokens = engine_count(timings.get("cache_n"), "timings.cache_n", flags)
            stats.decode_tps = engine_rate(timings.get("predicted_per_second"), "timings.predicted_per_second", flags)
            stats.prefill_tps = engine_rate(timings.get("prompt_per_second"), "timings.prompt_per_second", flags)
            # Absent keys mean the request drafted nothing, not "unknown".
            stats.drafted = engine_count(timings.get("draft_n", 0), "timings.draft_n", flags)
            stats.accepted = engine_count(timings.get("draft_n_accepted", 0), "timings.draft_n_accepted", flags)
        else:
            flags.append(sample_flag("server-timings-missing").line() if timings is None else
                         sample_flag("bad-engine-value").line(f"timings is {str(timings)[:40]}"))
            timings = None
        drafting = bool(stats.drafted) or (arm is not None and arm.speculative.enabled)
        checked = self._check_metrics(http, before, stats, drafting)
        checked = self._check_log(log, stats, drafting) or checked
        if before is None:
            stats.unavailable.update(drafts=NO_OWN_METRICS, accepted_per_position=NO_OWN_METRICS)
        if drafting and before is None:
            flags.append(sample_flag("acceptance-crosscheck-missing").line(
                "no /metrics snapshot or log line of its own "
                "(concurrent streams share both)"))
        elif drafting and timings is not None and not checked:
            flags.append(sample_flag("acceptance-crosscheck-missing").line(
                "neither /metrics nor the log confirmed the timings"))
        return stats

    def _check_metrics(self, http: httpx.Client, before: Any, stats: ServerStats, drafting: bool) -> bool:
        """Draft steps from the ``/metrics`` delta, and accepted tokens against the timings; True if compared."""
        if not isinstance(before, dict):
            return False
        after = scrape(http)
        if before.get("metrics") is None or after is None:
            if drafting:
                stats.flags.append(sample_flag("metrics-unavailable").line())
            stats.unavailable.update(drafts="/metrics could not be read",
                                     accepted_per_position="/metrics could not be read")
            return False
        flags: list[str] = []
        drafts = counter_delta(before["metrics"], after, M_DRAFTS, flags)
        accepted = counter_delta(before["metrics"], after, M_ACCEPTED, flags)
        stats.accepted_per_position = position_deltas(before["metrics"], after, M_PER_POS, flags)
        if stats.accepted_per_position is None:
            stats.unavailable["accepted_per_position"] = f"/metrics has no usable {M_PER_POS} for this request"
        stats.flags += flags
        if drafts is None or accepted is None:
            if drafting and not flags:
                stats.flags.append(sample_flag("metrics-unavailable").line(
                    "/metrics has no llamacpp:spec_decode counters"))
            stats.unavailable["drafts"] = "/metrics has no llamacpp:spec_decode_num_drafts_total"
            return False
        stats.drafts = drafts
        if stats.accepted is not None and accepted != stats.accepted:
            stats.flags.append(sample_flag("acceptance-mismatch").line(
                f"/metrics {accepted} vs timings {stats.accepted}"))
        return stats.accepted is not None

    def _check_log(self, log: EngineLog, stats: ServerStats, drafting: bool) -> bool:
        """The request's ``draft acceptance`` line against the timings; True if compared.

        The line is written just after the last token, so when the chunk read for the request lacks it the
        engine log is polled briefly (sequential requests only: concurrent streams share the log).
        """
        lines = parse_acceptance_lines(log.text())
        if not lines and drafting and log.followed:
            lines = parse_acceptance_lines(log.wait_for(lambda t: bool(ACCEPTANCE_RE.search(t))))
        if not lines:
            if drafting and log.followed:
                stats.flags.append(sample_flag("log-missing").line(
                    "no 'draft acceptance' line for this request in the engine log"))
            return False
        last = lines[-1]
        stats.extra["log_mean_len"] = last["mean_len"]
        if stats.accepted is None or stats.drafted is None:
            return False
        if (last["accepted"], last["generated"]) != (stats.accepted, stats.drafted):
            stats.flags.append(sample_flag("acceptance-log-mismatch").line(
                f"log {last['accepted']}/{last['generated']} "
                f"vs timings {stats.accepted}/{stats.drafted}"))
        return True


class LlamaCppPrefixCache(PrefixCache):
    """A session reuses its prefix only in the slot that holds it: every turn is pinned to slot 0 (turns are sent
    one at a time, and sessions run one after another)."""

    def request_fields(self, arm: Arm) -> dict[str, Any]:
        # A session reuses its prefix only in the slot that holds it: every turn is pinned to slot 0 (turns are
        # sent one at a time, and sessions run one after another).
        return {"cache_prompt": True, "id_slot": 0}


class LlamaCppWitness(Witness):
    """``logprobs`` name every token the stream sends (speculation off only: with it on, b11434 names no accepted
    draft token), and ``/tokenize`` counts the delivered answer."""

    def every(self, arm: Arm) -> int:
        return 0 if arm.speculative.enabled else LlamaCppOptions.model_validate(arm.options).witness_every

    def fields(self, arm: Arm) -> dict[str, Any]:
        return {"logprobs": True}

    def count_output_tokens(self, http: httpx.Client, text: str) -> int | None:
        # the text as generated: no BOS, and special-token spellings in it are text, not control tokens
        try:
            r = http.post("/tokenize", json={"content": text, "add_special": False, "parse_special": False},
                          timeout=30)
            tokens = r.json().get("tokens") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return len(tokens) if isinstance(tokens, list) else None


class LlamaCppSelftest(Selftest):
    """Every mapped method on tiny synthesized models, through the installed llama-server."""

    def cases(self, log: Callable[[str], None]) -> tuple[list[SelftestCase], list[str]]:
        """Every mapped method on tiny synthesized models, through the installed llama-server."""
        from .selftest import selftest_cases

        INSTALLER.locate(LlamaCppOptions())  # EngineUnavailable before synthesizing
        return selftest_cases(log)


class LlamaBench(ReferenceBench):
    """The same build's llama-bench beside the arm's decode rate (engines/llamacpp/bench.py)."""

    def reference(self, adapter: Any, arm: Arm, depth: int, n_gen: int, server_tps: list[float | None],
                  log: Callable[[str], None]) -> dict[str, Any]:
        from .bench import reference

        return reference(adapter, arm, depth, n_gen, server_tps, log)


class LlamaCppAdapter(EngineAdapter[LlamaCppOptions]):
    name = "llamacpp"
    description = "llama.cpp llama-server (GGUF), native process"
    capabilities = Capabilities(
        speculative=SPECULATIVE,
        default_variants=DEFAULT_VARIANTS,
        settings=("ctx", "parallel", "threads", "gpu_layers", "split", "tensor_split", "kv_type", "flash_attn",
                  "batch", "ubatch"),
        split_modes=("none", "layer", "row", "tensor"),
        kv_types=("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"),
        token_counts="engine_per_chunk",  # cumulative timings.predicted_n via timings_per_token (request_fields)
        acceptance_source="timings.draft_n/draft_n_accepted per response, cross-checked with the log line",
        launch_modes=("native", "compose"),
        docker_image=COMPOSE_IMAGE_CPU,
        stateful_speculators=("ngram-mod", "ngram-cache"),
        fixed_length_field="ignore_eos",
        thinking_field="chat_template_kwargs",
        build_options=("binary", "build_version"),
        setting_defaults={"parallel": 1},  # launch_spec passes -np 1 when parallel is unset
    )
    display_name = "llama-server"
    startup_failures = STARTUP_FAILURES

    installer: ClassVar[LlamaCppInstaller] = INSTALLER
    reader = LlamaCppReader()
    prefix_cache = LlamaCppPrefixCache()
    # response_format's schema becomes a GBNF grammar; tools go through the Jinja chat template (--jinja,
    # on by default since llama.cpp made it so; an arm passing --no-jinja loses tool calls)
    structured = StructuredOutputs(kinds=("json_schema", "tool_call"))
    witness = LlamaCppWitness()
    selftest = LlamaCppSelftest()
    reference_bench = LlamaBench()
    # launch: compose: the same flags in ggml-org's pinned server image (CUDA when gpu_layers is set and not 0);
    # the image ships curl, and /health answers 503 until the model is loaded
    compose = ComposeImage(COMPOSE_IMAGE_CPU, COMPOSE_PORT,
                           ("CMD", "curl", "-fsS", f"http://127.0.0.1:{COMPOSE_PORT}/health"),
                           gpus="with_gpu_layers", gpu_image=COMPOSE_IMAGE_CUDA)

    def binary_record(self, options: LlamaCppOptions) -> dict[str, Any]:
        """What run.json says about the binary: path, where it was found, backend and build flags."""
        return self.installer.binary_record(options.binary, options.build_version)

    def missing(self, arm: Arm) -> list[Missing]:
        if arm.launch != "native":
            return []
        try:
            options = self.options(arm)
            binary, source = self.installer.binary_choice(options.binary, options.build_version)
        except EngineUnavailable:
            return [Missing("llama-server is not installed", "bakeoff engines install llamacpp")]
        if not binary.is_file():
            return [Missing(f"llama-server from {source} does not exist: {binary}",
                            "bakeoff engines install llamacpp (or correct the path)")]
        return []

    # -- preflight -----------------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        from .gguf_meta import read_gguf_facts

        spec = arm.speculative
        if arm.launch == "native":
            binary = Path(self.installer.locate(self.options(arm)).argv[0])
            if arm.settings.split:
                modes = split_modes_of(binary)
                if modes is not None and arm.settings.split not in modes:
                    raise PreflightError(f"arm {arm.name!r}: settings.split {arm.settings.split!r} is not a split mode "
                                         f"of {binary} (it has: {', '.join(modes)})")
        model = resolve_model(arm.launched_model)
        try:
            target = read_gguf_facts(model)
            draft = read_gguf_facts(resolve_model(spec.draft_model)) if spec.draft_model else None
        except ValueError as exc:
            raise PreflightError(f"arm {arm.name!r}: {exc}") from exc
        if spec.method == "mtp":
            if draft is not None and not draft.has_mtp:
                raise PreflightError(f"arm {arm.name!r}: draft {draft.path.name} has no MTP (NextN) tensors")
            if draft is None and not target.has_mtp:
                raise PreflightError(
                    f"arm {arm.name!r}: MTP needs a model with MTP (NextN) layers, but {model.name} "
                    f"(architecture {target.architecture}) has {target.architecture}.nextn_predict_layers = "
                    f"{target.nextn_layers}. Use a GGUF converted with its MTP heads, or another method.")
        # a plain draft must be a plain model: llama.cpp would run a dflash/eagle3/MTP file as something else
        expected = {"dflash": ("dflash", "dflash2"), "dspark": ("dspark",), "eagle3": ("eagle3",), "draft": ("plain",)}
        if draft is not None and spec.method in expected and draft.draft_kind not in expected[spec.method]:
            raise PreflightError(
                f"arm {arm.name!r}: draft {draft.path.name} is a {draft.draft_kind!r} model "
                f"(architecture {draft.architecture!r}), not a {spec.method} draft")

    # -- launch --------------------------------------------------------------------------
    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        assert launch.program is not None  # core locates it for every native launch (resolve_launch)
        options, s = self.options(arm), arm.settings
        argv = [*launch.program.argv, "-m", launch.model, "--host", s.host, "--port", str(launch.port),
                "--metrics", "--no-webui", "-np", str(s.parallel or 1)]
        argv += self._setting_flags(arm, options)
        argv += spec_args(arm, options, launch.draft_model)
        argv += arm.extra_args
        return LaunchSpec(argv=argv, env={**launch.program.env, **arm.env}, ready_path="/health")

    def _setting_flags(self, arm: Arm, options: LlamaCppOptions) -> list[str]:
        s = arm.settings
        # settings.ctx is per request; with -np N (kv_unified off) the server splits -c into N slots
        return _flags([
            ("-c", s.ctx * (s.parallel or 1) if s.ctx else None), ("-t", s.threads), ("-ngl", s.gpu_layers),
            ("-sm", s.split),
            ("-ts", ",".join(f"{x:g}" for x in s.tensor_split) if s.tensor_split else None),
            ("-ctk", s.kv_type), ("-ctv", s.kv_type), ("-fa", s.flash_attn), ("-b", s.batch), ("-ub", s.ubatch),
            ("-lv", options.verbosity),
        ])

    def with_served_name(self, arm: Arm, name: str) -> Arm:
        return arm.model_copy(update={"extra_args": [*arm.extra_args, "--alias", name]})

    # -- startup -------------------------------------------------------------------------
    def is_ready(self, response: httpx.Response) -> bool:
        return response.status_code == 200  # 503 {"error": {"message": "Loading model"}} until loaded

    # -- requests ------------------------------------------------------------------------
    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        # cache_prompt: repeats must not be served from the prompt cache. timings_per_token: cumulative
        # timings on every chunk, so predicted_n counts tokens per event exactly ("one token per event" is
        # not always true: a token ending inside a UTF-8 character streams with the next one).
        fields: dict[str, Any] = {"cache_prompt": False, "timings_per_token": True}
        return fields










@functools.lru_cache(maxsize=8)
def split_modes_of(binary: Path) -> tuple[str, ...] | None:
    """The ``--split-mode`` values this llama-server's --help lists (``tensor`` is newer than ``row``), or None
    when the help cannot be read."""
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(binary.parent),
                                                                         os.environ.get("LD_LIBRARY_PATH")]))}
    try:
        text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30, env=env,
                              check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"--split-mode \{([a-z,]+)\}", text)
    return tuple(m[1].split(",")) if m else None
