"""The bakeoff file: arms (engine + model + speculation + settings) and one workload for all of them.

Every model here forbids unknown keys, so a typo is an error that names the key and the line it is on,
never a silently ignored setting. Engine-specific keys live under an arm's ``options:`` and are
validated by that engine's own pydantic model when the run is planned.
"""

from __future__ import annotations

import ipaddress
import math
import re
import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionToolChoiceOptionParam
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..common.errors import ConfigError
from ..common.textfmt import did_you_mean
from .answer_schema import schema_problem
from .bounds import (
    MAX_ARMS,
    MAX_COUNT,
    MAX_DAY_S,
    MAX_DRAFT_TOKENS,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_STREAMS,
    MAX_SYNTHETIC_WORDS,
    MAX_TOKENS,
    MAX_WEEK_S,
)
from .capacity import CapacitySection
from .live import LiveService, Phases
from .placement import ExecutorSpec, Host, check_placement

__all__ = [
    "SPEC_METHODS",
    "ARM_NAME_MAX",
    "Arrival",
    "Slo",
    "Speculative",
    "Settings",
    "Arm",
    "ArmOrigin",
    "RequestOverrides",
    "Prompt",
    "Workload",
    "SessionsSpec",
    "SyntheticSessions",
    "BakeoffFile",
    "CalibrateSection",
    "GateSpec",
    "TuneSection",
    "parse_share",
    "format_validation_error",
    "yaml_line",
]

SPEC_METHODS = ("none", "mtp", "dflash", "dspark", "eagle3", "draft", "ngram", "suffix")
SpecMethod = Literal["none", "mtp", "dflash", "dspark", "eagle3", "draft", "ngram", "suffix"]
ARM_NAME_MAX = 100
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


GateName = Literal["arithmetic", "factual", "tool_call", "needle", "stream_equality"]


class Strict(BaseModel):
    # NaN and infinity pass every bound check (NaN compares false) and then fail at request time, or are stored
    # as bare NaN in run.json (not JSON): no setting of a bakeoff file needs them
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Speculative(Strict):
    """One speculative vocabulary for every engine; each adapter maps it to its own flags."""

    method: SpecMethod = Field("none", description="Speculative method; 'none' switches speculation off.")
    n_max: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS, description="Most draft tokens per step (llama.cpp "
                              "--spec-draft-n-max, vLLM num_speculative_tokens, TabbyAPI draft_num_tokens).")
    n_min: int | None = Field(None, ge=0, le=MAX_DRAFT_TOKENS,
                              description="Fewest draft tokens per step (llama.cpp --spec-draft-n-min).")
    p_min: float | None = Field(None, ge=0, le=1, description="Minimum draft probability to keep drafting.")
    draft_model: str | None = Field(None, description="Path of the draft model (GGUF file or model directory).")
    variant: str | None = Field(None, description="The engine's own sub-type, e.g. llama.cpp ngram 'mod', 'simple', "
                                                  "'map-k', 'map-k4v', 'cache'.")
    lookup_min: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS,
                                   description="n-gram: shortest match to look up (vLLM prompt_lookup_min).")
    lookup_max: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS,
                                   description="n-gram: longest match to look up (vLLM prompt_lookup_max).")

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def set_fields(self) -> set[str]:
        """Knobs the user set explicitly (besides method), so adapters can refuse those they lack."""
        return {k for k in self.model_fields_set if k != "method" and getattr(self, k) is not None}


class Settings(Strict):
    """Engine-neutral launch settings; an adapter refuses any it cannot map (see its capabilities)."""

    ctx: int | None = Field(None, ge=1, le=MAX_TOKENS,
                            description="Context length per request (llama.cpp -c per slot, vLLM --max-model-len).")
    parallel: int | None = Field(None, ge=1, le=MAX_STREAMS,
                                 description="Concurrent sequences/slots (llama.cpp -np, vLLM --max-num-seqs).")
    threads: int | None = Field(None, ge=1, le=MAX_COUNT, description="CPU threads for generation (llama.cpp -t).")
    gpu_layers: int | Literal["auto", "all"] | None = Field(None, description="Layers on the GPU (llama.cpp -ngl).")
    split: Literal["none", "layer", "row", "tensor"] | None = Field(None, description="Multi-GPU split mode.")
    tensor_split: list[float] | None = Field(None, description="Share of the model per GPU (llama.cpp -ts, "
                                                               "TabbyAPI gpu_split).")
    tensor_parallel: int | None = Field(None, ge=1, le=MAX_COUNT, description="Tensor-parallel size (vLLM -tp).")
    pipeline_parallel: int | None = Field(None, ge=1, le=MAX_COUNT, description="Pipeline-parallel size (vLLM -pp).")
    gpus: list[int] | None = Field(None, min_length=1, description="GPU indices the engine may use: bakeoff sets "
                                   "CUDA_VISIBLE_DEVICES for the engine and records telemetry of these GPUs only.")
    kv_type: str | None = Field(None, description="KV cache type (llama.cpp -ctk/-ctv, vLLM --kv-cache-dtype).")
    flash_attn: Literal["on", "off", "auto"] | None = Field(None, description="Flash attention (llama.cpp -fa).")
    batch: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Logical batch size (llama.cpp -b).")
    ubatch: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Physical batch size (llama.cpp -ub).")
    dtype: str | None = Field(None, description="Weights/activation dtype (vLLM --dtype).")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="vLLM --gpu-memory-utilization.")
    enforce_eager: bool | None = Field(None, description="vLLM --enforce-eager (no compile/graphs: fast boot).")
    host: str = Field("127.0.0.1", description="Interface the engine binds to (an IPv4 address or localhost); "
                                                "loopback unless you say otherwise.")
    port: int | None = Field(None, ge=1, le=65535, description="Port; a free one is picked when unset.")

    @field_validator("host")
    @classmethod
    def _bindable_host(cls, value: str) -> str:
        # the launcher binds an IPv4 socket to it: an IPv6 address or a name it would have to resolve fails
        # only after the engine was started
        if value == "localhost":
            return value
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError("give an IPv4 address such as 127.0.0.1 (or localhost): the engine binds to it, "
                             "and IPv6 addresses and host names are not supported") from None
        return value

    def set_fields(self) -> set[str]:
        return {k for k in self.model_fields_set if k not in ("host", "port") and getattr(self, k) is not None}


class RequestOverrides(Strict):
    """Per-arm request-level workload values: arms differing only in these share one engine start."""

    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS,
                                   description="Output tokens per request for this arm (an output-length sweep).")
    fixed_length: bool | None = Field(None, description="Force exactly max_tokens for this arm.")
    thinking: bool | None = Field(None, description="Let reasoning models think, for this arm.")
    text_witness: bool | None = Field(None, description="workload.text_witness for this arm (false only for "
                                                        "a paired cost check).")


SWEEP_DESCRIPTION = ("Matrix sweep: dotted arm keys to lists of values, e.g. {speculative.n_max: [1, 2, 3], "
                     "settings.split: [layer, tensor]}; every combination becomes a named arm.")


@dataclass(frozen=True)
class ArmOrigin:
    """Where an arm was written: its file, the arm's YAML mapping and its index in the file's ``arms:``.

    Checks made after loading (an engine's ``options:``, validated by its adapter) use it to name the line.
    """

    source: str
    node: yaml.Node | None
    index: int


class Arm(Strict):
    """One contestant: an engine, a model and how it runs."""

    name: str = Field(description="Unique arm name, used in tables and file names.")
    engine: str = Field(description="Engine entry-point name (see `bakeoff engines`).")
    model: str | None = Field(None, description="Model path, or a built-in name such as 'smollm2'.")
    url: str | None = Field(None,
                            description="Attach mode: base URL of an already-running server; nothing is launched.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key "
                                                      "(the key itself is never written anywhere).")
    launch: Literal["native", "docker", "compose"] = Field("native", description="How the engine is started.")
    speculative: Speculative = Field(default_factory=Speculative)
    settings: Settings = Field(default_factory=Settings)
    extra_args: list[str] = Field(default_factory=list, description="Extra engine flags, passed verbatim and recorded.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the engine process.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Engine-specific options, validated by the adapter.")
    workload: RequestOverrides = Field(default_factory=RequestOverrides,
                                       description="Request-level workload values for this arm only.")
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description=SWEEP_DESCRIPTION)
    swept: dict[str, Any] = Field(default_factory=dict, description="Set by sweep expansion: the sweep point "
                                                                    "this arm stands for (key -> value).")
    _origin: ArmOrigin | None = PrivateAttr(default=None)  # not part of the arm: never dumped or compared

    @property
    def origin(self) -> ArmOrigin | None:
        """Where the arm was written (None for an arm not read from a file, e.g. from run.json)."""
        return self._origin

    def set_origin(self, origin: ArmOrigin | None) -> None:
        self._origin = origin

    @field_validator("name")
    @classmethod
    def _name_is_filename_safe(cls, v: str) -> str:
        if not _ARM_NAME.match(v):
            raise ValueError("use letters, digits, '.', '_', '+' or '-' (it becomes a file name)")
        if len(v) > ARM_NAME_MAX:  # file systems refuse names over 255 bytes; tables need far fewer
            raise ValueError(f"{len(v)} characters; at most {ARM_NAME_MAX} (it becomes a directory name)")
        return v

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            parts = urlsplit(v)
            port = parts.port  # parses it: a bad port fails here, not at the first request
        except ValueError as exc:
            raise ValueError(f"not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"use an http:// or https:// URL, not {parts.scheme or 'no scheme'!r}")
        if not parts.hostname:
            raise ValueError("the URL names no host")
        if port == 0:
            raise ValueError("port 0 is not a port a server listens on")
        return v

    @model_validator(mode="after")
    def _model_or_url(self) -> Arm:
        if self.url is None and self.model is None:
            raise ValueError("an arm needs 'model' (to launch an engine) or 'url' (to attach to a running server)")
        return self

    @property
    def attached(self) -> bool:
        return self.url is not None

    @property
    def launched_model(self) -> str:
        """The model a launched arm starts: the one place that says a launched arm needs a model (an arm is
        built with 'model' or 'url'; only an arm copied without validation reaches the error)."""
        if self.model is None:
            raise ConfigError(f"arm {self.name!r}: launching an engine needs 'model' (or set 'url' to attach)")
        return self.model


class Prompt(Strict):
    name: str = Field(description="Short prompt name; a column in the tables.")
    kind: str = Field("custom", description="What the prompt exercises: code, prose, math, ...")
    messages: list[dict[str, str]] = Field(description="Chat messages sent as-is.")
    response_format: ResponseFormatJSONSchema | None = Field(
        None, description="Structured output: OpenAI's {type: json_schema, json_schema: {name, schema}}; every "
                          "answer is validated against the schema.")
    tools: list[ChatCompletionFunctionToolParam] | None = Field(
        None, description="Tool calling: OpenAI's function tools; the answer must call one with arguments valid "
                          "against its parameters.")
    tool_choice: ChatCompletionToolChoiceOptionParam | None = Field(
        None, description="OpenAI's tool_choice (auto, required, none, or a named function); needs tools.")

    @model_validator(mode="after")
    def _structured_consistent(self) -> Prompt:
        if self.tool_choice is not None and not self.tools:
            raise ValueError("tool_choice needs tools")
        if self.response_format is not None and self.tools:
            raise ValueError("give response_format or tools, not both: each answer is validated against one")
        schemas = [("response_format.json_schema.schema", self.response_format["json_schema"].get("schema"))
                   ] if self.response_format is not None else []
        schemas += [(f"tools[{i}].function.parameters", t["function"].get("parameters"))
                    for i, t in enumerate(self.tools or [])]
        for where, schema in schemas:
            if schema is None:
                raise ValueError(f"{where} is missing: bakeoff validates every answer against it")
            if why := schema_problem(where, schema):
                raise ValueError(why)
        choice: Any = self.tool_choice
        named = choice["function"].get("name") if isinstance(choice, dict) and choice.get("type") == "function" \
            else None
        declared = [t["function"]["name"] for t in self.tools or []]
        if named is not None and named not in declared:
            raise ValueError(f"tool_choice names {named!r}, which is not among tools ({', '.join(declared)}): "
                             "every answer would be judged invalid")
        return self

    @property
    def structured(self) -> str | None:
        """json_schema or tool_call for a structured prompt, None for free text."""
        return "json_schema" if self.response_format else "tool_call" if self.tools else None


class SamplingMode(Strict):
    temperature: float = Field(0.0, ge=0, le=100)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=-1, description="-1 or 0: no top-k (vLLM, llama.cpp)")
    seed: int | None = None


DEFAULT_MODES: dict[str, SamplingMode] = {
    "greedy": SamplingMode(temperature=0.0),
    "sampled": SamplingMode(temperature=0.7, top_p=0.8, top_k=20, seed=1234),
}


def _levels(v: list[int] | None, most: int, what: str) -> list[int] | None:
    """Depths, stream counts: a non-empty list of distinct positive integers up to ``most`` (or unset)."""
    if v is not None and (not v or any(x < 1 for x in v)):
        raise ValueError("give a non-empty list of positive integers")
    if v is not None and max(v) > most:
        raise ValueError(f"{max(v):,} is more than {most:,}, the most {what}")
    _no_repeats(v or [], "level")
    return v


def _depths(v: list[int] | None) -> list[int] | None:
    return _levels(v, MAX_TOKENS, "tokens a depth may have (beyond any model's context)")


def _streams(v: list[int] | None) -> list[int] | None:
    return _levels(v, MAX_STREAMS, "streams a level may have (each is a client thread and a connection)")


def _no_repeats(values: list[Any], what: str) -> None:
    """A value listed twice would measure the same point twice (and stop the run when it is stored)."""
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{what} {v!r} is listed twice")
        seen.add(v)


class SyntheticSessions(Strict):
    """A built-in agent loop: a system prompt with tool schemas, then turns that each add a tool result."""

    sessions: int = Field(2, ge=1, le=10_000, description="Sessions (each replayed whole, turn by turn).")
    turns: int = Field(4, ge=1, le=10_000, description="Timed turns per session.")
    tool_result_tokens: int = Field(300, ge=1, le=1_000_000, description="Size of each turn's tool result, in "
                                    "words (about one token each; the engine's own counts are recorded).")
    reply_tokens: int = Field(32, ge=1, le=100_000, description="Size of each recorded assistant reply, in words.")
    seed: int = Field(0, description="The text is drawn from this seed: the same sessions on every arm and run.")

    @model_validator(mode="after")
    def _buildable(self) -> SyntheticSessions:
        words = self.sessions * self.turns * (self.tool_result_tokens + self.reply_tokens)
        if words > MAX_SYNTHETIC_WORDS:
            raise ValueError(f"sessions x turns x (tool_result_tokens + reply_tokens) is {words:,} words, more than "
                             f"the {MAX_SYNTHETIC_WORDS:,} the sessions may hold (they are built whole whenever "
                             "they are read); make fewer or shorter sessions")
        return self


class SessionsSpec(Strict):
    """Multi-turn sessions replayed with the prefix cache on (core/config/sessions.py)."""

    synthetic: SyntheticSessions | None = None
    file: str | None = Field(None, description="A JSONL file: one session per line, an OpenAI-format message list "
                             "(or {id, messages}); every turn ends with its recorded assistant reply.")
    file_sha256: str | None = Field(None, description="Set by bakeoff when it reads the file: the SHA-256 of its "
                                    "bytes, recorded in run.json. The run, and its resume, replay exactly that "
                                    "content; a file changed since is refused.")

    @model_validator(mode="after")
    def _one_source(self) -> SessionsSpec:
        if (self.synthetic is None) == (self.file is None):
            raise ValueError("give exactly one of 'synthetic' or 'file'")
        if self.file_sha256 is not None and self.file is None:
            raise ValueError("file_sha256 is the hash of 'file'; synthetic sessions have none")
        return self


StructuredKind = Literal["json_schema", "tool_call"]


class Structured(Strict):
    """``workload.structured``: tool calls and JSON-schema outputs, timed like any prompt, each answer validated."""

    kinds: list[StructuredKind] = Field(default_factory=lambda: list(get_args(StructuredKind)),
                                        description="Built-in structured prompts to add to the suite.")
    max_tokens: int | None = Field(256, ge=1, le=MAX_TOKENS, description="Limit of each structured answer (never "
                                   "forced: the grammar ends it); None: the workload's max_tokens.")
    stall_s: float = Field(2.0, gt=0, description="A pause between two token events mid-answer at least this long "
                                                   "(and stall_factor times the stream's median gap) is a stall.")
    stall_factor: float = Field(10.0, ge=1, description="How far beyond the stream's own median gap a stall is.")

    @field_validator("kinds")
    @classmethod
    def _kinds_listed_once(cls, v: list[StructuredKind]) -> list[StructuredKind]:
        _no_repeats(v, "kind")
        return v


class Arrival(Strict):
    """Open-loop load: requests sent at scheduled times whatever the server does (GuideLLM's and AIPerf's
    request-rate load), unlike ``concurrency``, where each stream waits for its previous answer."""

    rates: list[float] = Field(description="Request rates to run, in requests per second (one point each).")
    distribution: Literal["poisson", "constant"] = Field(
        "poisson", description="poisson: exponential gaps drawn from `seed`; constant: exactly 1/rate apart.")
    requests: int | None = Field(None, ge=1, le=MAX_REQUESTS, description="Requests per rate point.")
    duration_s: float | None = Field(None, gt=0, le=MAX_DAY_S, description="Or: schedule rate x duration_s requests "
                                     f"(at most {MAX_REQUESTS:,}).")
    seed: int = Field(0, description="Seed of the Poisson schedule (every arm gets the same schedule).")
    max_in_flight: int | None = Field(None, ge=1, le=MAX_STREAMS, description="Most requests the client keeps open; "
                                      "a request due while that many are open waits, and its latency still counts "
                                      "from its scheduled time (None: no limit).")

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, v: list[float]) -> list[float]:
        if not v or any(r <= 0 for r in v):
            raise ValueError("give a non-empty list of positive rates (requests per second)")
        if max(v) > MAX_RATE:
            raise ValueError(f"rate {max(v):g} is more than the {MAX_RATE:,.0f} requests per second a point may have")
        _no_repeats(v, "rate")
        return v

    @model_validator(mode="after")
    def _one_size(self) -> Arrival:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of 'requests' or 'duration_s'")
        for rate in self.rates:  # each size within its bound, the schedule they make may still not be
            count = self.count(rate)
            if count > MAX_REQUESTS:
                raise ValueError(f"rate {rate:g} for duration_s {self.duration_s:g} schedules {count:,} requests, "
                                 f"more than the {MAX_REQUESTS:,} a point may have (the bound of 'requests')")
            if (span := (count - 1) / rate) > MAX_DAY_S:
                raise ValueError(f"{count:,} requests at rate {rate:g} are spread over {span:.3g} s, more than the "
                                 f"{MAX_DAY_S:,} s (a day, the bound of 'duration_s') a point may take; raise the "
                                 "rate or send fewer requests")
        return self

    def count(self, rate: float) -> int:
        """Requests scheduled at ``rate``."""
        return self.requests if self.requests is not None else max(1, round(rate * (self.duration_s or 0)))


class Slo(Strict):
    """One service-level tier: a request meets it when every limit given holds."""

    ttft_s: float | None = Field(None, gt=0, description="Most seconds to the first token (from the scheduled "
                                 "send time under open-loop load).")
    tpot_s: float | None = Field(None, gt=0, description="Most seconds per output token after the first.")
    e2e_s: float | None = Field(None, gt=0, description="Most seconds for the whole answer.")

    @model_validator(mode="after")
    def _some_limit(self) -> Slo:
        if self.ttft_s is None and self.tpot_s is None and self.e2e_s is None:
            raise ValueError("give at least one of ttft_s, tpot_s, e2e_s")
        return self


class Workload(Strict):
    """What every arm is asked to do, identically."""

    suite: str | list[Prompt] = Field("default", description="Built-in suite name or a list of prompts.")
    prompts: list[str] | None = Field(None, description="Run only these prompts of the suite, by name.")
    max_tokens: int = Field(512, ge=1, le=MAX_TOKENS, description="Output tokens per request.")
    fixed_length: bool = Field(True,
                               description="Force exactly max_tokens (ignore_eos / min_tokens, the engine's way).")
    modes: list[str] = Field(default_factory=lambda: ["greedy"], description="Sampling modes to run: names from "
                                                                             "'sampling' or built-ins greedy/sampled.")
    sampling: dict[str, SamplingMode] = Field(default_factory=dict, description="Extra or overridden sampling modes.")
    reps: int = Field(3, ge=1, le=1_000_000, description="Timed requests per prompt and mode, per pass.")
    passes: int = Field(1, ge=1, le=10_000, description="Interleaved passes over all arms.")
    equivalence_margin: float = Field(0.03, le=0.5, description="A ratio whose interval lies within 1 ± this "
                                      "share reads 'equivalent' (an equivalence test); a gain or loss inside it "
                                      "is no reason to change a setting (docs/statistics.md). '3%' or 0.03.")
    extra_launches: int = Field(4, ge=0, le=1000, description="Most extra engine starts (passes of the affected "
                                "arms and the baseline) drawn when an arm's launches fall in two speed bands, until "
                                "each band has enough launches for its own interval (docs/statistics.md); 0: none.")
    warmup: int = Field(1, ge=0, le=10_000, description="Untimed requests after each engine start, at least (0: "
                                                        "none at all).")
    warmup_settle: float | None = Field(0.15, gt=0, le=1, description="Keep warming up until two consecutive "
                                        "warm-up decode rates differ by at most this fraction (engines come up "
                                        "in slow states); None: exactly `warmup` requests.")
    warmup_max: int = Field(4, ge=1, le=10_000, description="Most untimed requests per engine start while the "
                                                            "decode rate has not settled (recorded as unsettled).")
    thinking: bool = Field(False, description="Let reasoning models think (off by default, via chat_template_kwargs).")
    text_witness: bool = Field(True, description="After each plain request, off the clock, count the delivered "
                               "text with the engine's own tokenizer (llama.cpp /tokenize) against "
                               "usage.completion_tokens, where the stream names no token one by one: a stream "
                               "cut short beyond 3 % (at least 2 tokens) is flagged text-witness-mismatch.")
    request_timeout_s: float = Field(300.0, gt=0, le=MAX_DAY_S,
                                     description="Per-request limit; a stalled stream becomes an error sample.")
    boot_timeout_s: float = Field(600.0, gt=0, le=MAX_DAY_S, description="Limit for an engine to become ready.")
    seed: int = Field(0, description="Seed for the order of arms in each pass (recorded).")
    gpu_sample_interval_s: float = Field(0.1, gt=0, le=5, description="GPU telemetry: seconds between NVML readings "
                                         "during each timed request (only where nvidia-ml-py finds a GPU).")
    depths: list[int] | None = Field(None, description="Context-depth sweep: exact prompt sizes in tokens "
                                                       "(chat template included, counted by the engine).")
    concurrency: list[int] | None = Field(None, description="Concurrency sweep: numbers of simultaneous streams.")
    sessions: SessionsSpec | None = Field(None, description="Multi-turn agent sessions instead of single prompts: "
                                          "each turn is timed with the prefix cache on; the verdict is on session "
                                          "time (docs/sessions.md).")
    needle: bool = Field(False, description="Depth sweep: hide a code in the filler; the answer must repeat it.")
    structured: Structured | None = Field(
        None, description="Timed structured requests (docs/structured.md): the built-in JSON-schema and "
                          "tool-call prompts of `kinds` run beside the plain prompts, each answer validated.")
    arrival: Arrival | None = Field(None, description="Open-loop load points: requests at scheduled times "
                                    "(Poisson or constant), latency counted from each request's scheduled time.")
    slo: dict[str, Slo] = Field(default_factory=dict, description="Goodput tiers: name -> limits; the load "
                                "section reports the requests per second meeting each.")
    gates: list[GateName] = Field(
        default_factory=lambda: list(get_args(GateName)),
        description="Quality probes sent once per arm after its timed requests (greedy, short); an arm failing "
                    "one is marked in every table and never reported faster. [] turns them off.")

    @field_validator("equivalence_margin", mode="before")
    @classmethod
    def _margin(cls, v: Any) -> float:
        return parse_share(v, "equivalence_margin")

    _depths_bounded = field_validator("depths")(_depths)
    _streams_bounded = field_validator("concurrency")(_streams)

    @field_validator("prompts")
    @classmethod
    def _prompts_listed_once(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("an empty list runs nothing; name at least one prompt, or leave 'prompts' out "
                             "to run the whole suite")
        _no_repeats(v or [], "prompt")
        return v

    @field_validator("modes")
    @classmethod
    def _modes_listed_once(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("an empty list runs nothing; name at least one mode (greedy, sampled)")
        _no_repeats(v, "mode")
        return v

    @field_validator("suite")
    @classmethod
    def _suite_names_unique(cls, v: str | list[Prompt]) -> str | list[Prompt]:
        if isinstance(v, list):
            if not v:
                raise ValueError("an empty suite runs nothing; give at least one prompt")
            _no_repeats([p.name for p in v], "prompt name")
        return v

    @model_validator(mode="after")
    def _arrival_alone(self) -> Workload:
        if self.arrival is not None and self.depths:
            raise ValueError("arrival: open-loop points do not combine with depths; run them in separate files")
        return self

    def sampling_modes(self) -> dict[str, SamplingMode]:
        return {**DEFAULT_MODES, **self.sampling}

    @model_validator(mode="after")
    def _sessions_alone(self) -> Workload:
        # structured prompts are single requests of the suite, which a sessions workload does not send
        others = [name for name in ("depths", "concurrency", "arrival", "structured") if getattr(self, name)]
        if self.sessions is not None and others:
            raise ValueError(f"'sessions' cannot be combined with {' or '.join(repr(n) for n in others)}: sessions "
                             "replay whole conversations one turn at a time, and send nothing else")
        return self

    @model_validator(mode="after")
    def _modes_known(self) -> Workload:
        known = self.sampling_modes()
        for mode in self.modes:
            if mode not in known:
                raise ValueError(f"unknown sampling mode {mode!r}; known: {', '.join(sorted(known))}")
        return self


class CalibrateSection(Strict):
    """Forced-acceptance calibration (core/config/calibration.py): speedup over spec-off per acceptance x n_max."""

    engine: Literal["llamacpp", "vllm"] = Field(description="llamacpp: models synthesized with the chosen "
                                                "acceptance; vllm: synthetic rejection sampling.")
    method: SpecMethod = Field("mtp", description="llamacpp: mtp (any acceptance) or dflash (0 and 1 only); "
                                                  "vllm: ngram or draft (the drafter whose drafts are forced).")
    n_max: list[int] = Field(default_factory=lambda: [1, 2, 3], description="Draft lengths to calibrate.")
    acceptance: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0],
                                    description="Forced acceptance (accepted / drafted) per point.")
    shape: Literal["tiny"] | dict[str, int] = Field("tiny", description="llamacpp: the synthesized model's "
                                                    "dimensions (tiny, or e.g. {hidden: 256, layers: 4}).")
    model: str | None = Field(None, description="vllm: the model served (default smollm2 converted).")
    settings: Settings = Field(default_factory=Settings)
    options: dict[str, Any] = Field(default_factory=dict, description="Engine options for every calibration arm.")

    @field_validator("n_max")
    @classmethod
    def _n_max_positive(cls, v: list[int]) -> list[int]:
        if not v or any(n < 1 for n in v):
            raise ValueError("give a non-empty list of draft lengths >= 1")
        if max(v) > MAX_DRAFT_TOKENS:
            raise ValueError(f"draft length {max(v):,} is more than the {MAX_DRAFT_TOKENS:,} a step may draft")
        _no_repeats(v, "n_max")
        return v

    @field_validator("acceptance")
    @classmethod
    def _acceptance_in_range(cls, v: list[float]) -> list[float]:
        if not v or any(not 0.0 <= a <= 1.0 for a in v):
            raise ValueError("give a non-empty list of acceptances within [0, 1]")
        _no_repeats(v, "acceptance")
        return v

    @model_validator(mode="after")
    def _method_fits_engine(self) -> CalibrateSection:
        allowed = {"llamacpp": ("mtp", "dflash"), "vllm": ("ngram", "draft")}[self.engine]
        if self.method not in allowed:
            raise ValueError(f"method {self.method!r} cannot be calibrated on {self.engine}; use "
                             f"{' or '.join(allowed)}")
        if self.engine == "llamacpp" and self.method == "dflash" and set(self.acceptance) - {0.0, 1.0}:
            raise ValueError("llamacpp dflash synthesizes acceptance 0 and 1 only (random or agreeing pair)")
        if (arms := len(self.n_max) * len(self.acceptance) + 1) > MAX_ARMS:
            raise ValueError(f"n_max x acceptance makes {arms:,} arms (spec-off included), more than the "
                             f"{MAX_ARMS:,} a run may have")
        return self


def parse_share(value: Any, what: str = "value") -> float:
    """``'3%'``, ``'3 %'``, ``0.03`` or ``'0.03'`` as 0.03; a share must lie in (0, 1).

    :raises ValueError: naming ``what``: not a number, a bare number of 1 or more (write 3% or 0.03), or out of
        range.
    """
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        number = float(text.rstrip("%").strip())
    except ValueError:
        raise ValueError(f"{what} {value!r}: give a percentage such as 3% (or a share such as 0.03)") from None
    if not percent and number >= 1:
        raise ValueError(f"{what} {value!r}: write 3% or 0.03; a bare number of 1 or more is ambiguous")
    share = number / 100 if percent else number
    if not 0 < share < 1:
        raise ValueError(f"{what} {value!r}: give a percentage between 0 and 100 %")
    return share


class GateSpec(Strict):
    """A regression gate (``bakeoff gate FILE``): two builds of one engine, interleaved and paired."""

    reference: str = Field(description="The arm running the build you trust (today's engine).")
    candidate: str = Field(description="The arm running the build under test; it may differ from the reference "
                                       "only in the engine build (options.binary, a venv's python, an image).")
    max_slowdown: float = Field(0.03, description="Fail when the candidate is slower than this with confidence: "
                                "the upper bound of the paired ratio's interval below 1 - max_slowdown. "
                                "'3%' or 0.03. It passes only when the lower bound is at or above that line.")
    max_passes: int = Field(8, ge=3, le=50, description="While the interval straddles 1 - max_slowdown after "
                            "workload.passes, the gate adds interleaved passes, at most this many in all; still "
                            "straddling then: inconclusive (exit 6).")

    @field_validator("max_slowdown", mode="before")
    @classmethod
    def _share(cls, v: Any) -> float:
        return parse_share(v, "max_slowdown")

    @model_validator(mode="after")
    def _two_arms(self) -> GateSpec:
        if self.reference == self.candidate:
            raise ValueError(f"reference and candidate are both {self.reference!r}: name two arms")
        return self


class TuneSection(Strict):
    """``bakeoff tune FILE`` (docs/tune.md): race speculative settings against the baseline within a budget,
    verify the winner under changing load, compile it into the engine's configuration."""

    space: dict[str, list[Any]] = Field(description="The search space: dotted arm keys to lists of values, as in "
                                        "sweep:, e.g. {speculative.method: [ngram], speculative.n_max: [2, 4, 8]}; "
                                        "every combination, applied to the baseline arm, is a candidate. List each "
                                        "key's simplest value first: a plateau names the simplest.")
    budget_s: float = Field(900.0, gt=0, le=MAX_WEEK_S, description="Seconds the race may spend (verification "
                            "comes after it).")
    streams: list[int] | None = Field(None, description="The use case: simultaneous streams the race measures "
                                      "(workload.concurrency for the race), e.g. [1, 4].")
    depths: list[int] | None = Field(None, description="The use case: context depths the race measures.")
    prompts: list[str] | None = Field(None, description="The use case: prompt names (categories) of the suite.")
    max_passes: int = Field(10, ge=3, le=1000, description="Most race passes; the error budget of dropping a "
                            "candidate is spread over this many looks, as --stop-on-verdict spreads it.")
    verify_streams: list[int] = Field(default_factory=lambda: [1, 4, 2], description="Verification: concurrency "
                                      "levels in the order they are replayed (load that changes over time).")
    verify_passes: int = Field(3, ge=3, le=1000, description="Interleaved passes of the verification run.")

    @field_validator("space")
    @classmethod
    def _space_not_empty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not v:
            raise ValueError("give at least one dotted key with its values, e.g. speculative.n_max: [2, 4]")
        for key, values in v.items():
            if not values:
                raise ValueError(f"{key}: give at least one value")
        if (candidates := math.prod(len(values) for values in v.values())) > MAX_ARMS:
            raise ValueError(f"the space makes {candidates:,} candidates, more than the {MAX_ARMS:,} arms a run may "
                             "have (each is an engine start per pass); list fewer values")
        return v

    _depths_bounded = field_validator("depths")(_depths)
    _streams_bounded = field_validator("streams", "verify_streams")(_streams)


class BakeoffFile(Strict):
    """A whole bakeoff: arms, workload and the arm others are compared with."""

    name: str = Field("bakeoff", description="Title of the run.")
    arms: list[Arm] = Field(default_factory=list, max_length=MAX_ARMS, description="The contestants (may be [] "
                            "with a calibrate: section).")
    calibrate: list[CalibrateSection] | None = Field(None, description="Forced-acceptance calibration sections; "
                                                     "`bakeoff run` adds their arms (core/config/calibration.py).")
    workload: Workload = Field(default_factory=Workload)
    baseline: str | None = Field(None, description="Arm the others are compared with (default: the first).")
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description=SWEEP_DESCRIPTION + " Applies to "
                                                                                             "every arm.")
    live: LiveService | None = Field(None, description="The service serving real traffic: stopped for the run "
                                                       "and restored after it, with a watchdog (docs/live.md).")
    phases: Phases | None = Field(None, description="Live knobs in timed phases against one server that stays "
                                                    "up (docs/live.md).")
    executor: ExecutorSpec | None = Field(None, description="Where the run executes: local (default) or ray "
                                                            "(docs/ray.md); --executor overrides it.")
    hosts: list[Host] | None = Field(None, description="Ray only: which host runs which paired block of arms "
                                                       "(docs/ray.md).")
    gate: GateSpec | None = Field(None, description="A regression gate between two builds (`bakeoff gate FILE`, "
                                                    "docs/sharing.md); `bakeoff run` runs the arms without judging.")
    tune: TuneSection | None = Field(None, description="A tuning race (`bakeoff tune FILE`, docs/tune.md); "
                                                       "`bakeoff run` runs the file's arms without racing.")
    capacity: CapacitySection | None = Field(None, description="A capacity search (`bakeoff capacity FILE`, "
                                             "docs/capacity.md): each arm's highest load at which the SLOs hold, "
                                             "paired; `bakeoff run` ignores it.")

    @model_validator(mode="after")
    def _unique_names_and_baseline(self) -> BakeoffFile:
        if not self.arms and not self.calibrate:
            raise ValueError("arms: give at least one arm (or a calibrate: section)")
        seen: dict[str, None] = {}  # names in file order
        for arm in self.arms:
            if arm.name in seen:
                raise ValueError(f"arms[{len(seen)}].name: two arms are named {arm.name!r}")
            seen[arm.name] = None
        swept = bool(self.sweep) or any(a.sweep for a in self.arms)  # names checked after expansion
        if self.baseline is not None and self.baseline not in seen and not swept:
            # "baseline: ..." names the field, so the error shows the baseline's own line
            raise ValueError(f"baseline: {self.baseline!r} is not an arm name (arms: {', '.join(seen)})"
                             + did_you_mean(self.baseline, seen))
        if self.gate is not None and not swept:
            for role in ("reference", "candidate"):
                if getattr(self.gate, role) not in seen:
                    raise ValueError(f"gate.{role} {getattr(self.gate, role)!r} is not an arm name "
                                     f"(arms: {', '.join(seen)})")
        if self.hosts is not None and not swept:  # a swept file is checked again once expanded
            check_placement(self.hosts, [a.name for a in self.arms], self.baseline_arm)
        return self

    @field_validator("calibrate", mode="before")
    @classmethod
    def _one_section_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @property
    def baseline_arm(self) -> str:
        return self.baseline or self.arms[0].name


def _yaml_node(root: yaml.Node | None, loc: tuple[int | str, ...]) -> tuple[yaml.Node | None, int | None]:
    """The deepest node along ``loc`` in the composed YAML tree, and its 1-based line (that of its key, when
    the path stops at a key); the node is None when ``loc`` does not reach the end."""
    node, line = root, None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                return None, line
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None, line
    if node is not None:
        line = node.start_mark.line + 1
    return node, line


def yaml_line(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """1-based line of the deepest node along ``loc`` in the composed YAML tree."""
    return _yaml_node(root, loc)[1]


def _boolean_hint(node: yaml.Node | None, value: Any) -> str:
    """YAML 1.1 reads unquoted on/off/yes/no/true/false as booleans: say so where text was expected."""
    if isinstance(value, bool) and isinstance(node, yaml.ScalarNode) and node.style is None:
        return (f"; YAML reads the unquoted {node.value!r} as the boolean {str(value).lower()}: "
                f"quote it (\"{node.value}\")")
    return ""


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (through Optional, list and dict values), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list, dict):
        for arg in get_args(annotation):
            if (found := _model_in(arg)) is not None:
                return found
    return None


def _fields_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model that holds the last key of ``loc`` (for "did you mean")."""
    for part in loc[:-1]:
        if model is None:
            return []
        if isinstance(part, str):
            field = model.model_fields.get(part)
            model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


# A model-level validator names the field its message is about by opening the message with that field's
# path ("baseline: ..."), so the error can show the field's own line instead of the file's first.
_FIELD_PATH = re.compile(r"^((?:[A-Za-z_]\w*|\[\d+\])(?:\.[A-Za-z_]\w*|\[\d+\])*): ")


def _path_loc(path: str) -> tuple[int | str, ...]:
    return tuple(int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[A-Za-z_]\w*", path))


def format_validation_error(exc: ValidationError, source: str, root: yaml.Node | None = None,
                            prefix: tuple[int | str, ...] = (), model: type[BaseModel] | None = None,
                            node_prefix: tuple[int | str, ...] | None = None) -> str:
    """One line per problem: ``file:line: arms[0].settings.ctxx: unknown key; did you mean 'ctx'?``.

    :param model: the model validated (its field names are the suggestions for an unknown key).
    :param node_prefix: the path of the validated value inside ``root`` when it differs from ``prefix``
        (an arm's options validated against the arm's own YAML node).
    """
    lines = []
    for err in exc.errors():
        own = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-after", "union"))))
        msg = err["msg"].removeprefix("Value error, ")
        if not own and (match := _FIELD_PATH.match(msg)):  # a model-level check that names its field
            own, msg = _path_loc(match.group(1)), msg[match.end():]
        loc = prefix + own
        node, line = _yaml_node(root, (prefix if node_prefix is None else node_prefix) + own)
        where = f"{source}:{line}" if line else source
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not a field here; check the spelling)" + did_you_mean(str(own[-1]),
                                                                                     _fields_at(model, own))
        msg += _boolean_hint(node, err.get("input"))
        lines.append(f"{where}: {_dotted(loc) or '(top level)'}: {msg}")
    return "\n".join(lines)
