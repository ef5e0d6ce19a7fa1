"""The adapter contract: what an engine adapter (built-in or plugin) implements.

Adapters are declarative translators: they turn a normalized arm into the engine's own launch flags and
request fields, say how to tell the engine is ready, and declare the rest as small pieces, one concern each
(core/engine/pieces.py): the read-back, the prefix cache, structured outputs, the n_max schedule, the token
witness, the self-test, beside ``installer`` and ``compose``. Core owns processes, clocks, statistics and
storage; an adapter never starts a process or times a request itself. What core does with the contract
(resolving a launch, composing a service, the launch identity, the capability checks) lives apart, in
core/engine/launch.py and core/engine/checks.py.

Capabilities are declared as class attributes with conservative defaults and checked centrally
(:func:`~bakeoff.core.engine.checks.check_arm_capabilities`) before anything starts. An adapter written
against an earlier contract fails where it is defined, naming what replaced each hook (:data:`RETIRED_HOOKS`,
the migration table in docs/plugins.md).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, cast, get_args, get_origin

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import TypeVar

from ..common.errors import CapabilityNotSupported, ConfigError, EngineStartupError
from ..config.schema import SPEC_METHODS, Arm, Speculative, Workload, format_validation_error
from .client import TokenCounts
from .container import ComposeImage
from .install import Installer, Program
from .models import resolve_model
from .pieces import (
    NMaxSchedule,
    PrefixCache,
    Reader,
    ReferenceBench,
    Selftest,
    StructuredOutputs,
    Witness,
    first_matching_line,
)

__all__ = [
    "Capabilities",
    "DraftRule",
    "EngineAdapter",
    "FailureRule",
    "KNOBS",
    "LaunchInputs",
    "LaunchSpec",
    "MethodKnobs",
    "Missing",
    "NoOptions",
    "RETIRED_HOOKS",
    "cli_flags",
]


FailureRule = tuple[str, tuple[str, ...], str]  # (reason, log needles, advice for the user)


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
        if isinstance(data, dict) and "structured" in data:
            raise ValueError("Capabilities(structured=...) moved to the adapter's piece: structured = "
                             "StructuredOutputs(kinds=(...)); see docs/plugins.md")
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




class NoOptions(BaseModel):
    """An engine with no engine-specific options."""

    model_config = ConfigDict(extra="forbid")



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
    # The concerns below are pieces of their own (core/engine/pieces.py), each with defaults that fit a plain
    # OpenAI-compatible server; an engine declares only those it differs in.
    reader: ClassVar[Reader] = Reader()  # the read-back: settings, log, stream counts, server numbers
    prefix_cache: ClassVar[PrefixCache] = PrefixCache()  # how a sessions workload turns the cache on
    structured: ClassVar[StructuredOutputs] = StructuredOutputs()  # structured request kinds it takes
    witness: ClassVar[Witness] = Witness()  # the second witness of the token count
    n_max_schedule: ClassVar[NMaxSchedule | None] = None  # a per-batch-size n_max (bakeoff tune); None: none
    selftest: ClassVar[Selftest | None] = None  # bakeoff selftest's cases; None: no self-test
    reference_bench: ClassVar[ReferenceBench | None] = None  # the engine's own benchmark (conform --llama-bench)

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


    # -- per request ---------------------------------------------------------------------
    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        """Engine-specific JSON fields added to every chat request."""
        return {}


# Hooks of earlier contracts, each replaced by a piece of its own (docs/plugins.md's migration table says how to
# move; tests/unit/plugins/test_contract_by_concern.py keeps that table complete).
RETIRED_HOOKS = {
    "compose_service": "a ComposeImage as the class attribute 'compose'",
    "install": "an Installer as the class attribute 'installer'",
    "installed": "an Installer as the class attribute 'installer'",
    "install_hint": "an Installer as the class attribute 'installer' (its hint())",
    "effective_settings": "a Reader as the class attribute 'reader' (its effective_settings(http, arm, log))",
    "engine_term": "a Reader as the class attribute 'reader' (its engine_term(name, arm))",
    "log_mismatches": "a Reader as the class attribute 'reader' (its log_mismatches(arm, log_text))",
    "stream_options": "a Reader as the class attribute 'reader' (its stream_options(token_counts))",
    "chunk_token_count": "a Reader as the class attribute 'reader' (its chunk_token_count(payload))",
    "count_prompt_tokens": "a Reader as the class attribute 'reader' (its count_prompt_tokens(http, messages, "
                           "template_kwargs))",
    "before_request": "a Reader as the class attribute 'reader' (its before_request(http))",
    "server_stats": "a Reader as the class attribute 'reader' (its server_stats(http, final, before, log, arm=))",
    "session_fields": "a PrefixCache as the class attribute 'prefix_cache' (its request_fields(arm))",
    "for_sessions": "a PrefixCache as the class attribute 'prefix_cache' (its launch(arm))",
    "sessions_problem": "a PrefixCache as the class attribute 'prefix_cache' (its problem(arm))",
    "structured_problem": "a StructuredOutputs as the class attribute 'structured' (its problem(arm, kinds); "
                          "its kinds replace Capabilities.structured)",
    "with_n_max_schedule": "an NMaxSchedule as the class attribute 'n_max_schedule' (its apply(arm, schedule))",
    "witness_due": "a Witness as the class attribute 'witness' (every(arm) and fields(arm)); core counts the "
                   "requests",
    "count_output_tokens": "a Witness as the class attribute 'witness' (its count_output_tokens(http, text))",
    "selftest_cases": "a Selftest as the class attribute 'selftest' (its cases(log))",
}


def _refuse_the_earlier_contract(cls: type) -> None:
    """An adapter written against an earlier contract fails where it is defined, saying what replaced each hook it
    overrides, rather than running with hooks core no longer calls."""
    old = [hook for hook in RETIRED_HOOKS if hook in cls.__dict__]
    if old:
        raise TypeError("; ".join(f"{cls.__name__}.{hook}: this hook was replaced by {RETIRED_HOOKS[hook]}"
                                  for hook in old) + "; see docs/plugins.md")
    launch = cls.__dict__.get("launch_spec")
    if launch is not None and "port" in inspect.signature(launch).parameters:
        raise TypeError(f"{cls.__name__}.launch_spec(arm, port, workdir): it is launch_spec(arm, launch) now, with "
                        "the port, the resolved models and the engine's program in launch; see docs/plugins.md")


def cli_flags(pairs: list[tuple[str, Any]]) -> list[str]:
    """``[flag, str(value)]`` for every pair whose value is not None, in order (None means "engine default")."""
    out: list[str] = []
    for flag, value in pairs:
        if value is not None:
            out += [flag, str(value)]
    return out

