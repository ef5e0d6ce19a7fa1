"""The engine adapter contract.

Adapters are declarative translators: they turn a normalized arm into the engine's own launch flags,
say how to tell the engine is ready, read back what it really runs with, add the engine's own request
fields, and pull the server's own numbers (token counts, decode rate, drafted/accepted tokens) out of
responses, metrics or logs. Core owns processes, clocks, statistics and storage; an adapter never
starts a process or times a request itself.

Capabilities are declared as class attributes with conservative defaults and checked centrally
(:func:`check_arm_capabilities`) before anything starts.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, cast, get_args, get_origin

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import TypeVar

from ..analysis.acceptance import acceptance_rate
from ..common.errors import CapabilityNotSupported, ConfigError, EngineStartupError, PreflightError
from ..config.schema import (
    SPEC_METHODS,
    Arm,
    Prompt,
    Speculative,
    StructuredKind,
    Workload,
    format_validation_error,
)
from .client import SETUP_TIMEOUT_S, TokenCounts, bounded_get
from .container import ComposeImage, Mounts, compose_service_spec
from .effective import Effective, compare_effective
from .install import Installer, Program
from .models import resolve_model
from .readback import EngineLog

__all__ = [
    "check_structured",
    "Capabilities",
    "MethodKnobs",
    "KNOBS",
    "DraftRule",
    "LaunchSpec",
    "LaunchInputs",
    "resolve_launch",
    "check_program",
    "build_launch",
    "compose_service",
    "install_hint",
    "Missing",
    "Effective",
    "ServerStats",
    "EngineAdapter",
    "NoOptions",
    "check_arm_capabilities",
    "read_effective",
    "cli_flags",
    "method_key",
    "launch_fingerprint",
    "first_matching_line",
    "openai_model_id",
    "FailureRule",
    "GPU_LOG_TRAPS",
    "SelftestCase",
    "SelftestRow",
]


FailureRule = tuple[str, tuple[str, ...], str]  # (reason, log needles, advice for the user)
CORE_SETTINGS = frozenset({"gpus"})  # settings core applies itself (CUDA_VISIBLE_DEVICES), for every engine

# Log lines that start fine but cost speed on several GPUs (what, needles): each becomes a mismatch.
GPU_LOG_TRAPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no GPU peer-to-peer access (all-reduce goes through host memory)",
     ("lacks GPU P2P capability", "peer access is not supported", "P2P is not supported", "peer access not available")),
)


DraftRule = Literal["required", "optional", "forbidden"]
# The speculative fields a method may take besides ``method``, ``variant`` and ``draft_model``.
KNOBS: tuple[str, ...] = tuple(k for k in Speculative.model_fields if k not in ("method", "variant", "draft_model"))


class MethodKnobs(BaseModel):
    """What one speculative method, or one variant of it, takes on an engine.

    Every knob listed here must change what the adapter launches or sends; a knob it does not list is
    refused before anything starts (core enforces this once, in :func:`check_arm_capabilities`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    knobs: tuple[str, ...] = Field((), description=f"speculative.* fields this method maps ({', '.join(KNOBS)}).")
    draft_model: DraftRule = Field("forbidden", description="Whether speculative.draft_model is required, optional "
                                                            "or has no effect.")
    required: tuple[str, ...] = Field((), description="Knobs the engine has no default for: an arm must set them.")

    @model_validator(mode="after")
    def _known_knobs(self) -> MethodKnobs:
        unknown = [k for k in (*self.knobs, *self.required) if k not in KNOBS]
        if unknown:
            raise ValueError(f"unknown knob(s) {', '.join(unknown)}; knobs are: {', '.join(KNOBS)}")
        if not set(self.required) <= set(self.knobs):
            raise ValueError("every required knob must also be listed in knobs")
        return self


class Capabilities(BaseModel):
    """What an engine can do, declared by its adapter and printed by ``bakeoff engines``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    speculative: dict[str, MethodKnobs] = Field(
        default_factory=lambda: {"none": MethodKnobs()},
        description="Methods of the shared vocabulary it maps, keyed 'method' or 'method/variant' (one entry "
                    "per variant, e.g. 'ngram/mod'), each with the knobs it takes and its draft-model rule.")
    default_variants: dict[str, str] = Field(default_factory=dict, description="The variant an arm gets when it "
                                             "names a method with variants but no speculative.variant.")
    settings: tuple[str, ...] = Field((), description="Settings fields it maps to flags.")
    split_modes: tuple[str, ...] = ()
    kv_types: tuple[str, ...] = Field((), description="Accepted settings.kv_type values (checked before launch); "
                                                      "empty: the adapter validates kv_type itself.")
    token_counts: TokenCounts = Field("final_usage_only", description=(
        "What each SSE chunk says about its tokens: usage_per_chunk (continuous_usage_stats), engine_per_chunk "
        "(the engine's own cumulative count, via chunk_token_count), one_per_event, or final_usage_only "
        "(first-event tokens are then estimated and flagged)."))
    acceptance_source: str = Field("none", description="Where drafted/accepted counts come from.")
    launch_modes: tuple[str, ...] = ("native",)
    docker_image: str | None = None
    stateful_speculators: tuple[str, ...] = Field((), description="Methods/variants whose state carries across "
                                                                 "requests, so reps are not independent.")
    fixed_length_field: Literal["ignore_eos", "min_tokens", "none"] = Field("none", description=(
        "How core forces exactly max_tokens (workload.fixed_length) on every request: ignore_eos: true, or "
        "min_tokens set to the request's own max_tokens; none: short answers are flagged."))
    thinking_field: Literal["chat_template_kwargs", "none"] = Field("none", description=(
        "How core sends workload.thinking on every request: chat_template_kwargs.enable_thinking, or not at "
        "all (a server that would refuse an unknown field)."))
    structured: tuple[StructuredKind, ...] = Field((), description=(
        "Structured requests the engine takes in OpenAI's shape: json_schema (response_format with a schema, "
        "decoded under a grammar) and tool_call (tools and tool_choice); a prompt of another kind is refused "
        "before launch."))
    build_options: tuple[str, ...] = Field((), description=(
        "Options that choose the engine build rather than how it runs (llama.cpp's binary, a vLLM venv's python, "
        "an image): the configuration fingerprint leaves them out, and the two arms of a regression gate may "
        "differ in these only."))
    setting_defaults: dict[str, Any] = Field(default_factory=dict, description=(
        "Settings whose value is what the engine gets when they are unset (llama.cpp: parallel 1, since bakeoff "
        "passes -np 1): the fingerprint counts them as unset."))

    @model_validator(mode="before")
    @classmethod
    def _no_flat_knobs(cls, data: Any) -> Any:
        if isinstance(data, dict) and ({"speculative_methods", "speculative_knobs"} & set(data)):
            raise ValueError("speculative_methods/speculative_knobs were replaced by speculative={'method': "
                             "MethodKnobs(knobs=(...), draft_model=...)}, declared per method and variant")
        return data

    @model_validator(mode="after")
    def _consistent_methods(self) -> Capabilities:
        plain: set[str] = set()
        varied: set[str] = set()
        for key in self.speculative:
            method, _, variant = key.partition("/")
            if method not in SPEC_METHODS:
                raise ValueError(f"speculative: {method!r} is not a method of the shared vocabulary "
                                 f"({', '.join(SPEC_METHODS)})")
            (varied if variant else plain).add(method)
        if plain & varied:
            raise ValueError(f"speculative: {', '.join(sorted(plain & varied))} declared both with and without "
                             "variants")
        for method, variant in self.default_variants.items():
            if f"{method}/{variant}" not in self.speculative:
                raise ValueError(f"default_variants: {method}/{variant} is not declared in speculative")
        return self

    @property
    def speculative_methods(self) -> tuple[str, ...]:
        """The methods it maps, in declaration order."""
        return tuple(dict.fromkeys(key.partition("/")[0] for key in self.speculative))

    def variants(self, method: str) -> tuple[str, ...]:
        """The variants declared for ``method`` (empty when it has none)."""
        return tuple(v for key in self.speculative for m, _, v in [key.partition("/")] if m == method and v)


@dataclass
class LaunchSpec:
    """How to start an engine: a pure description, run by core's launcher."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_path: str = "/health"
    files: dict[str, str] = field(default_factory=dict)  # relative path -> content, written before launch
    container: str | None = None  # ``docker run --name``: its processes are the engine's own CPU (noise guard)


@dataclass(frozen=True)
class LaunchInputs:
    """What core resolved for one native or container launch, before it, and hands to ``launch_spec``.

    :param port: the port the engine listens on.
    :param workdir: the arm's directory (``LaunchSpec.files`` are written there; the engine may run in it).
    :param model: the launched model as this engine loads it (:meth:`EngineAdapter.model_ref`).
    :param draft_model: ``speculative.draft_model`` the same way; None when the arm has none.
    :param program: the engine's program (:meth:`Installer.locate`); None for a container launch or an
        engine without an installer.
    """

    port: int
    workdir: Path
    model: str
    draft_model: str | None = None
    program: Program | None = None


@dataclass(frozen=True)
class Missing:
    """Something this machine lacks to run an arm (``bakeoff check``), and the command that provides it."""

    what: str
    fix: str


class ServerStats(BaseModel):
    """The server's own numbers for one request, in one schema for every engine."""

    completion_tokens: int | None = Field(None, description="Server's count of generated tokens.")
    prompt_tokens: int | None = Field(None, description="Server's count of uncached prompt tokens processed.")
    cached_tokens: int | None = None
    decode_tps: float | None = Field(None, description="Server's own decode rate (llama.cpp predicted_per_second).")
    prefill_tps: float | None = Field(None, description="Server's own prompt rate.")
    drafted: int | None = Field(None, description="Draft tokens proposed; 0 when speculation proposed none.")
    accepted: int | None = Field(None, description="Draft tokens accepted.")
    drafts: int | None = Field(None, description="Draft steps (for mean accepted length).")
    accepted_per_position: list[int] | None = Field(
        None, description="Accepted draft tokens by draft position (first first), the engine's own counters.")
    accepted_histogram: list[int] | None = Field(
        None, description="The engine's own count of draft steps that accepted 0, 1, 2, ... tokens.")
    unavailable: dict[str, str] = Field(
        default_factory=dict, description="Acceptance field (core/analysis/acceptance.py names) -> why this engine or "
                                          "this request cannot give it.")
    derived: dict[str, str] = Field(default_factory=dict, description="Acceptance field computed, not read -> how.")
    source: str | None = Field(None, description="Where the draft counts came from.")
    flags: list[str] = Field(default_factory=list, description="Disagreements the adapter found (e.g. log vs JSON).")
    extra: dict[str, Any] = Field(default_factory=dict)


class NoOptions(BaseModel):
    """An engine with no engine-specific options."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class SelftestCase:
    """One method to check.

    :param label: the row name (``dflash2``, ``ngram-map-k``).
    :param arm: the arm to run; its name becomes the run directory's arm name.
    :param flags: the engine flags the adapter emits for it, for the table.
    :param expect_speculation: speculation must be really on (True) or off (False).
    :param need_drafts: with speculation on, at least one token must have been drafted.
    :param min_acceptance: lowest acceptable accepted/drafted (None: not checked).
    :param prompt: the prompt to send instead of the default one.
    """

    label: str
    arm: Arm
    flags: str = ""
    expect_speculation: bool = True
    need_drafts: bool = True
    min_acceptance: float | None = None
    prompt: Prompt | None = None


@dataclass
class SelftestRow:
    """One self-test case's outcome: what the engine did, and every problem found (none: it passed)."""

    label: str
    flags: str
    started: bool = False
    speculative: bool | None = None  # what the engine reports (Effective.speculative)
    drafted: int | None = None
    accepted: int | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    version: str | None = None
    run_dir: Path | None = None

    @property
    def acceptance(self) -> float | None:
        return acceptance_rate(self.accepted, self.drafted) if self.accepted is not None else None

    @property
    def ok(self) -> bool:
        return not self.problems


# An adapter's options model. Covariant (it is only returned) with a default, so code that takes any adapter
# writes plain ``EngineAdapter``.
OptionsT = TypeVar("OptionsT", bound=BaseModel, covariant=True, default=BaseModel)


class EngineAdapter(ABC, Generic[OptionsT]):
    """Base class of every engine adapter (built-in or plugin).

    Subclasses name their options model as the type parameter (``class Mine(EngineAdapter[MyOptions])``), which
    sets :attr:`Options` and makes :meth:`options` return ``MyOptions``; set :attr:`name` and
    :attr:`capabilities`, and implement :meth:`launch_spec`. Everything else has a reasonable OpenAI-compatible
    default.
    """

    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    Options: ClassVar[type[BaseModel]] = NoOptions  # set from the type parameter; NoOptions when there is none
    display_name: ClassVar[str] = ""  # how logs and errors call the engine ("llama-server"); default: name
    # (reason, needles, advice): the first rule with a needle in the log classifies a failed start, and
    # its log line is quoted. Argument errors belong first: engines print them before loading anything.
    startup_failures: ClassVar[tuple[FailureRule, ...]] = ()
    # Where the engine's program is and how to install it (None: nothing to find, e.g. a server in this
    # package, or an engine that only attaches); core locates the program before launch.
    installer: ClassVar[Installer[Any] | None] = None
    # How the engine runs under launch: compose (None: it does not); core builds the service (compose_service).
    compose: ClassVar[ComposeImage | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _refuse_the_earlier_contract(cls)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is not None and issubclass(get_origin(base), EngineAdapter):
                (model,) = get_args(base)
                if not (isinstance(model, type) and issubclass(model, BaseModel)):
                    continue  # still generic (a TypeVar): a later subclass names the model
                declared = cls.__dict__.get("Options", model)
                if declared is not model:
                    raise TypeError(f"{cls.__name__}: Options = {declared.__name__} but the type parameter is "
                                    f"{model.__name__}; name the options model once, as the type parameter")
                cls.Options = model

    def options(self, arm: Arm, index: int | None = None) -> OptionsT:
        """Validate ``arm.options`` with this engine's Options model.

        :raises ConfigError: naming the bad key as ``arms[i].options.key``.
        """
        try:
            # Options is the type parameter's class (__init_subclass__), so the cast states what holds
            return cast(OptionsT, self.Options.model_validate(arm.options))
        except ValidationError as exc:
            origin = arm.origin
            if origin is not None:  # read from a file: the line of the bad key
                text = format_validation_error(exc, origin.source, origin.node, model=self.Options,
                                               prefix=("arms", origin.index, "options"), node_prefix=("options",))
            else:
                where = ("arms", index, "options") if index is not None else ("options",)
                text = format_validation_error(exc, f"arm {arm.name!r}", prefix=where, model=self.Options)
            raise ConfigError(text) from exc

    def default_options(self) -> OptionsT:
        """The options an arm that sets none gets."""
        return cast(OptionsT, self.Options())

    # -- before launch -----------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        """Refuse an arm that cannot work before spending a launch on it (raise PreflightError)."""

    def missing(self, arm: Arm) -> list[Missing]:
        """What this machine still lacks to run ``arm`` natively (``bakeoff check``): the engine's binary or
        environment, a conversion only the installer makes. Found by looking only: nothing is run, downloaded,
        built or converted. Model files, Docker and API keys are core's to check. Default: nothing known.
        """
        return []

    def model_ref(self, model: str) -> str:
        """What the engine loads for an arm's ``model`` or ``draft_model``, resolved by core before launch.
        Default: a built-in model's cached file, or an existing path.

        :raises ConfigError: naming the model when it is neither.
        """
        return str(resolve_model(model))

    @abstractmethod
    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        """Turn an arm into argv + env. Pure translation: the program and the models come resolved in
        ``launch`` (:func:`resolve_launch`); nothing here reads or writes a file."""

    def with_served_name(self, arm: Arm, name: str) -> Arm:
        """The arm serving its model under ``name`` on /v1/models (``bakeoff promote --served-name``).

        :raises CapabilityNotSupported: the engine has no such flag.
        """
        raise CapabilityNotSupported(f"arm {arm.name!r}: {self.name} cannot set the served model name; "
                                     "set it in the arm's extra_args or options")

    def with_n_max_schedule(self, arm: Arm, schedule: list[list[int]]) -> Arm:
        """The arm with a per-batch-size n_max schedule (``bakeoff tune``'s compile): entries ``[first, last,
        n_max]`` over inclusive batch-size ranges, first starting at 1; the launch command then carries it.

        :raises CapabilityNotSupported: the engine, as installed for this arm, takes no such schedule (say why).
        """
        raise CapabilityNotSupported(f"{self.display_name or self.name} takes no per-batch-size n_max schedule")

    def selftest_cases(self, log: Callable[[str], None]) -> tuple[list[SelftestCase], list[str]]:
        """The self-test (``bakeoff selftest``): one case per speculative method this adapter maps, usually on
        tiny models it provides, and the mapped methods it has no case for (each becomes a failed row). Core
        runs the cases through the normal protocol; the adapter only declares them.

        :param log: receives progress lines (e.g. while synthesizing models).
        :raises CapabilityNotSupported: this adapter has no self-test.
        """
        raise CapabilityNotSupported(f"{self.name} has no self-test")

    # -- startup -------------------------------------------------------------------------
    def is_ready(self, response: httpx.Response) -> bool:
        """Whether a response from ``LaunchSpec.ready_path`` means the model is loaded."""
        return response.status_code == 200

    def classify_startup_failure(self, log_text: str) -> EngineStartupError | None:
        """Map an engine log to a classified startup error quoting the decisive line, or None."""
        for reason, needles, advice in self.startup_failures:
            line = first_matching_line(log_text, needles)
            if line:
                return EngineStartupError(f"{self.display_name or self.name} failed to start ({reason}): "
                                          f"{advice}. Log: {line}", reason=reason, log_line=line)
        return None

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        """Read back what the engine really runs with: fill :class:`Effective`'s common fields (and their
        ``sources``) with what the engine reports, ``raw`` with everything read, and ``mismatches`` with the
        checks only this engine has. ``log.text()`` is the engine's log since it started ('' when attached).
        Core compares the common fields with the arm (:func:`read_effective`)."""
        problems: list[str] = []
        eff = Effective(model_id=openai_model_id(http, problems=problems))
        if problems:
            eff.notes["model_id"] = problems[0]
        return eff

    def engine_term(self, name: Literal["spec_method", "kv_type"], arm: Arm) -> str | None:
        """What the arm's speculative method or ``settings.kv_type`` is called in this engine's read-back
        (llama.cpp's 'draft-mtp', TabbyAPI's 'Q8'), for :func:`compare_effective`; None: not compared."""
        return None

    def log_mismatches(self, arm: Arm, log_text: str) -> list[str]:
        """Mismatches the engine's startup log shows (asked for a GPU, runs on the CPU; no P2P between GPUs).

        The default knows engine-neutral multi-GPU traps (:data:`GPU_LOG_TRAPS`); adapters add their own.
        """
        out = []
        for what, needles in GPU_LOG_TRAPS:
            line = first_matching_line(log_text, needles)
            if line:
                out.append(f"{what}: {line}")
        return out

    # -- per request ---------------------------------------------------------------------
    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        """Engine-specific JSON fields added to every chat request."""
        return {}

    def witness_due(self, every: int) -> bool:
        """Whether this request is one of the one-in-``every`` that ask the engine to name the tokens it sends (a
        second witness of the token count, core/measure/invariants.py); 0: none. For :meth:`request_fields`: one
        adapter instance serves one arm, so the count is this arm's requests (timed, warm-up and gates alike)."""
        self._witness_requests = getattr(self, "_witness_requests", 0) + 1
        return bool(every) and (self._witness_requests - 1) % every == 0

    def session_fields(self, arm: Arm) -> dict[str, Any]:
        """Engine-only request fields that turn the prefix cache on for a sessions workload's turns (they replace
        :meth:`request_fields`' cache-busting ones), recorded in the arm's attempt. The default, none, leaves
        the server's own default (an attached OpenAI-compatible server); an engine whose cache is a launch
        switch turns it on in :meth:`for_sessions` instead."""
        return {}

    def sessions_problem(self, arm: Arm) -> str | None:
        """Why this arm cannot replay sessions with its prefix cache on (a launch switch the user turned off), or
        None. A sessions workload refuses the arm before anything starts."""
        return None

    def structured_problem(self, arm: Arm, kinds: Sequence[str]) -> str | None:
        """Why this arm, as launched, cannot answer these structured request kinds although the engine declares
        them (a launch flag the engine needs for them is missing), or None. Refused before anything starts."""
        return None

    def for_sessions(self, arm: Arm) -> Arm:
        """The arm as a sessions workload launches it: an engine whose prefix cache is a launch switch turns it
        on here (the plan's arm, so its fingerprint, argv.txt and read-back show it). The default: unchanged."""
        return arm

    def stream_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"include_usage": True}
        if self.capabilities.token_counts == "usage_per_chunk":
            opts["continuous_usage_stats"] = True
        return opts

    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        """Prompt tokens the engine will process for these chat messages, chat template included,
        counted by the engine's own tokenizer (depth sweeps pad prompts to exact sizes with it).

        :param template_kwargs: ``chat_template_kwargs`` the timed request will carry.
        :raises CapabilityNotSupported: the engine has no way to count them.
        :raises MeasurementError: the engine's tokenizer endpoint failed.
        """
        raise CapabilityNotSupported(f"{self.name} cannot count prompt tokens with its own tokenizer, "
                                     "so it cannot run a depth sweep")

    def count_output_tokens(self, http: httpx.Client, text: str) -> int | None:
        """The delivered answer's tokens, counted by the engine's own tokenizer after the request, off the clock:
        the second witness of ``usage.completion_tokens`` where the stream names no token one by one
        (core/measure/invariants.py). None: the engine has no tokenizer endpoint, or it failed (no witness,
        never an error: the request itself succeeded)."""
        return None

    def chunk_token_count(self, payload: dict[str, Any]) -> object:
        """Cumulative generated tokens carried by one SSE payload, or None when it carries no count."""
        usage = payload.get("usage")
        return usage.get("completion_tokens") if isinstance(usage, dict) else None

    def before_request(self, http: httpx.Client) -> Any:
        """Snapshot taken just before a timed request (e.g. /metrics counters); passed to server_stats."""
        return None

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any,
                     log: EngineLog) -> ServerStats:
        """The server's own numbers for the request that just finished.

        :param final: the last JSON payload of the stream that carried usage (may hold engine extras).
        :param before: what :meth:`before_request` returned.
        :param log: the engine log written while the request ran (``log.text()``; '' when attached), and
            ``log.wait_for(needle)`` for a per-request line written just after the stream (no wait when
            the log is not this request's alone).
        """
        return ServerStats()


def openai_model_id(http: httpx.Client, timeout_s: float = SETUP_TIMEOUT_S,
                    problems: list[str] | None = None) -> str | None:
    """The first model id from ``/v1/models``; None if the server does not list one within ``timeout_s``, and
    then why is appended to ``problems`` (a timeout, a refused connection, an HTTP status, a listing without
    ids): a read-back that lost its model id must say so, not leave a blank."""
    try:
        response = bounded_get(http, "/v1/models", timeout_s)
        if response.status_code != 200:
            why = f"HTTP {response.status_code}"
        else:
            return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        why = f"{type(exc).__name__}: {str(exc)[:160]}"
    if problems is not None:
        problems.append(f"GET /v1/models: no model id ({why})")
    return None


def read_effective(adapter: EngineAdapter, http: httpx.Client, arm: Arm, log: EngineLog | None = None) -> Effective:
    """The engine's read-back with core's asked-versus-running mismatches added after the adapter's own.

    :param log: the engine's log so far (None: attached, no log).
    """
    eff = adapter.effective_settings(http, arm, log or EngineLog())
    terms = {name: adapter.engine_term(name, arm) for name in ("spec_method", "kv_type")}
    eff.mismatches += compare_effective(arm, eff, adapter.display_name or adapter.name, terms)
    return eff


def check_arm_capabilities(adapter: EngineAdapter, arm: Arm) -> None:
    """Refuse, before launch, any knob the engine lacks: a silent no-op would mislabel the arm.

    Speculative knobs are checked against what the arm's method (and n-gram variant) takes, so a knob the
    engine has for one method is still refused for another that would ignore it.

    :raises CapabilityNotSupported: naming the field, the method and what the engine offers instead.
    """
    caps = adapter.capabilities
    _check_speculative(adapter, arm)
    if not arm.attached:
        for knob in sorted(arm.settings.set_fields() - set(caps.settings) - CORE_SETTINGS):
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: settings.{knob} has no {adapter.name} flag; it is refused rather than "
                f"ignored (supported: {', '.join(caps.settings)})")
        if arm.launch not in caps.launch_modes:
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: launch {arm.launch!r} is not available for {adapter.name} "
                f"(available: {', '.join(caps.launch_modes)})")
    if arm.settings.split and caps.split_modes and arm.settings.split not in caps.split_modes:
        raise CapabilityNotSupported(f"arm {arm.name!r}: settings.split {arm.settings.split!r} not in "
                                     f"{', '.join(caps.split_modes)}")
    if arm.settings.kv_type and caps.kv_types and arm.settings.kv_type not in caps.kv_types:
        raise CapabilityNotSupported(f"arm {arm.name!r}: settings.kv_type {arm.settings.kv_type!r} is not a "
                                     f"{adapter.name} KV cache type ({', '.join(caps.kv_types)})")


def check_structured(adapter: EngineAdapter, arm: Arm, kinds: Iterable[str]) -> None:
    """Refuse, before launch, structured requests the engine does not take (a server that ignored
    ``response_format`` would answer free text, and every answer would read as invalid).

    :raises CapabilityNotSupported: naming the kind and what the engine takes.
    """
    offered, wanted = adapter.capabilities.structured, list(dict.fromkeys(kinds))
    for kind in wanted:
        if kind not in offered:
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: {adapter.name} does not declare {kind} requests (it takes: "
                f"{', '.join(offered) or 'none'}); leave the structured prompts out for this arm's run")
    if wanted and (problem := adapter.structured_problem(arm, wanted)):
        raise CapabilityNotSupported(f"arm {arm.name!r}: {problem}")


def method_key(caps: Capabilities, spec: Speculative) -> str | None:
    """The ``speculative`` entry an arm's method and variant select ('ngram/mod'), or None if undeclared."""
    if not caps.variants(spec.method):
        return spec.method if spec.method in caps.speculative and spec.variant is None else None
    variant = spec.variant or caps.default_variants.get(spec.method)
    key = f"{spec.method}/{variant}"
    return key if key in caps.speculative else None


def _check_speculative(adapter: EngineAdapter, arm: Arm) -> None:
    caps, spec, engine = adapter.capabilities, arm.speculative, adapter.name
    who = f"arm {arm.name!r}"
    if spec.method not in caps.speculative_methods:
        raise CapabilityNotSupported(f"{who}: {engine} has no speculative method {spec.method!r}; "
                                     f"it supports: {', '.join(caps.speculative_methods)}")
    variants = caps.variants(spec.method)
    if spec.variant is not None and not variants:
        raise CapabilityNotSupported(f"{who}: speculative.variant has no effect on {engine} method {spec.method!r}, "
                                     f"which has no variants; {_variant_owners(caps)}")
    if variants and spec.variant is None and spec.method not in caps.default_variants:
        raise CapabilityNotSupported(f"{who}: {engine} method {spec.method!r} needs speculative.variant "
                                     f"(one of: {', '.join(variants)})")
    if variants and spec.variant is not None and spec.variant not in variants:
        raise CapabilityNotSupported(f"{who}: speculative.variant {spec.variant!r} is not a {engine} "
                                     f"{spec.method} variant; it offers: {', '.join(variants)}")
    key = method_key(caps, spec)
    assert key is not None
    declared = caps.speculative[key]
    where = f"{engine} {_label(key)}"
    takes = f"it takes: {', '.join(declared.knobs) or 'no knobs'}"
    for knob in sorted(spec.set_fields() - {"variant", "draft_model"} - set(declared.knobs)):
        others = [k.replace("/", "-") for k, m in caps.speculative.items() if knob in m.knobs]
        elsewhere = f" ({knob} is taken by: {', '.join(others)})" if others else ""
        raise CapabilityNotSupported(f"{who}: speculative.{knob} has no effect on {where}; {takes}{elsewhere}")
    if spec.draft_model is not None and declared.draft_model == "forbidden":
        raise CapabilityNotSupported(f"{who}: speculative.draft_model has no effect on {where}: it uses no draft "
                                     f"model; {takes}")
    if arm.attached:
        return  # the server is already running: what it needs is not ours to set
    if spec.draft_model is None and declared.draft_model == "required":
        raise CapabilityNotSupported(f"{who}: {where} needs speculative.draft_model (the draft model); without one "
                                     f"the engine would not speculate as labelled")
    for knob in declared.required:
        if getattr(spec, knob) is None:
            raise CapabilityNotSupported(f"{who}: {where} needs speculative.{knob} (the engine has no default "
                                         f"for it)")


def _label(key: str) -> str:
    """'ngram/simple' -> 'ngram-simple' (the name engines and messages use); plain methods as they are."""
    method, _, variant = key.partition("/")
    return f"method {method!r}" if not variant else f"{method}-{variant} (method {method!r}, variant {variant!r})"


def _variant_owners(caps: Capabilities) -> str:
    owners = [m for m in caps.speculative_methods if caps.variants(m)]
    return f"variants exist for: {', '.join(owners)}" if owners else "it has no method with variants"


PLAN_PORT = 18000
PLAN_WORKDIR = Path("/nonexistent/bakeoff-plan")


def launch_fingerprint(adapter: EngineAdapter, arm: Arm, workload: Workload) -> str:
    """What an arm would launch and send, independent of its name and port, as one comparable string.

    The adapter's launch spec (or compose service) and request fields for a copy of the arm renamed to a
    fixed name. Calling it before launch also proves the adapter can build the launch: any ConfigError it
    raises surfaces at plan time. Attached arms launch nothing and fingerprint only their requests.
    """
    probe = copy.copy(adapter)  # launch_spec may remember paths on the instance; keep the real one clean
    plain = arm.model_copy(update={"name": "arm"})
    port = arm.settings.port or PLAN_PORT
    launch: Any
    if arm.attached:
        launch = {"url": arm.url}
    elif arm.launch == "compose":
        launch = compose_service(probe, plain, resolve_launch(probe, plain, port, PLAN_WORKDIR))
    else:
        spec = build_launch(probe, plain, port, PLAN_WORKDIR)
        launch = {"argv": spec.argv, "env": spec.env, "cwd": str(spec.cwd), "files": spec.files,
                  "ready": spec.ready_path}
    request = {"stream_options": probe.stream_options(), "fields": probe.request_fields(plain, workload),
               "workload": workload.model_dump(mode="json")}
    return json.dumps({"launch": launch, "request": request}, sort_keys=True, default=str)


# Hooks of the earlier contract, each replaced by a piece of its own (docs/plugins.md says how to move).
RETIRED_HOOKS = {
    "compose_service": "a ComposeImage as the class attribute 'compose'",
    "install": "an Installer as the class attribute 'installer'",
    "installed": "an Installer as the class attribute 'installer'",
    "install_hint": "an Installer as the class attribute 'installer' (its hint())",
}


def _refuse_the_earlier_contract(cls: type) -> None:
    """An adapter written against the earlier contract fails where it is defined, saying what replaced what,
    rather than running with a hook core no longer calls."""
    for hook, now in RETIRED_HOOKS.items():
        if hook in cls.__dict__:
            raise TypeError(f"{cls.__name__}.{hook}: this hook was replaced by {now}; see docs/plugins.md")
    launch = cls.__dict__.get("launch_spec")
    if launch is not None and "port" in inspect.signature(launch).parameters:
        raise TypeError(f"{cls.__name__}.launch_spec(arm, port, workdir): it is launch_spec(arm, launch) now, with "
                        "the port, the resolved models and the engine's program in launch; see docs/plugins.md")


def install_hint(adapter: EngineAdapter) -> str:
    """How to install the adapter's engine, for errors about a missing one."""
    if adapter.installer is not None:
        return adapter.installer.hint()
    return f"see `bakeoff engines` for how to install {adapter.name}"


def resolve_launch(adapter: EngineAdapter, arm: Arm, port: int, workdir: Path) -> LaunchInputs:
    """Everything a launch needs from this machine, found once before it: the engine's program (a native
    launch of an engine with an installer) and the models as the engine loads them.

    :raises EngineUnavailable: the program is not installed (naming where it was looked for).
    :raises ConfigError: a model is neither a built-in nor an existing path (naming it).
    """
    model = arm.launched_model  # first: "launching an engine needs 'model'" before anything is looked for
    program = None
    if arm.launch == "native" and adapter.installer is not None:
        program = adapter.installer.locate(adapter.options(arm))
    draft = arm.speculative.draft_model
    return LaunchInputs(port=port, workdir=workdir, model=adapter.model_ref(model),
                        draft_model=adapter.model_ref(draft) if draft else None, program=program)


def check_program(adapter: EngineAdapter, arm: Arm) -> None:
    """Refuse a native arm whose engine program is not on this machine (an ``options.binary`` naming no file)
    before any arm launches: found only at its launch, the other arms would be measured first, pass after pass.

    :raises EngineUnavailable: the engine is nowhere to be found (its installer says where it looked).
    :raises PreflightError: the program's path names no file (naming the option it came from, and the path).
    """
    if arm.launch != "native" or adapter.installer is None:
        return
    program = adapter.installer.locate(adapter.options(arm))
    command = program.argv[0]
    path = Path(command)
    if path.is_file() or (os.sep not in command and shutil.which(command)):
        return
    option = next((f"options.{k}" for k, v in arm.options.items()
                   if isinstance(v, str) and Path(v).expanduser() == path), None)
    where = option or f"the {adapter.name} program from {program.found_in or 'its installer'}"
    raise PreflightError(f"arm {arm.name!r}: {where} {command!r} does not exist"
                         + (" (correct the path, or leave it out to use an installed build)" if option else ""))


def compose_service(adapter: EngineAdapter, arm: Arm, launch: LaunchInputs) -> dict[str, Any]:
    """The arm as one docker compose service (``launch: compose``), published on ``127.0.0.1:launch.port``: the
    adapter's own launch spec for the inside of its :class:`ComposeImage`, each local model bind-mounted read-only
    at the path the command names, a hub id read from the image's hub cache, GPUs reserved as the image says.

    :raises CapabilityNotSupported: the adapter declares no compose image.
    """
    image = adapter.compose
    if image is None:
        raise CapabilityNotSupported(f"arm {arm.name!r}: {adapter.name} has no docker compose service "
                                     f"(launch: compose)")
    mounts, cache = Mounts(), image.hub_cache(arm)
    hub = [ref for ref in (launch.model, launch.draft_model) if ref is not None and not Path(ref).is_absolute()]

    def inside(ref: str) -> str:
        return ref if ref in hub else mounts.place(ref)

    model = inside(launch.model)  # first: the model is /models/0
    draft = inside(launch.draft_model) if launch.draft_model is not None else None
    inner = LaunchInputs(port=image.inner_port, workdir=launch.workdir, model=model, draft_model=draft,
                         program=Program(image.program))
    there = arm.model_copy(update={"settings": arm.settings.model_copy(update={"host": "0.0.0.0"})})
    spec = adapter.launch_spec(there, inner)
    gpus = image.uses_gpus(arm)
    env = dict(spec.env)
    service = compose_service_spec(image.image_of(arm), spec.argv, launch.port, image.inner_port, list(image.health),
                                   mounts=mounts, env=env, gpus=gpus, **image.extra)
    if hub and cache is not None:
        service["volumes"].append({"type": "bind", "source": str(Path(cache).expanduser()),
                                   "target": "/root/.cache/huggingface", "read_only": True})
        env.setdefault("HF_HUB_OFFLINE", "1")
        service["environment"] = env
    return service


def build_launch(adapter: EngineAdapter, arm: Arm, port: int, workdir: Path) -> LaunchSpec:
    """The arm's launch spec: :func:`resolve_launch`, then the adapter's pure translation."""
    return adapter.launch_spec(arm, resolve_launch(adapter, arm, port, workdir))


def first_matching_line(log_text: str, needles: tuple[str, ...]) -> str | None:
    """The first log line containing any of ``needles``, stripped; for quoting in errors."""
    for line in log_text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return None


def cli_flags(pairs: list[tuple[str, Any]]) -> list[str]:
    """``[flag, str(value)]`` for every pair whose value is not None, in order (None means "engine default")."""
    out: list[str] = []
    for flag, value in pairs:
        if value is not None:
            out += [flag, str(value)]
    return out
