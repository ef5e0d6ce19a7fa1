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

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .client import SETUP_TIMEOUT_S, TokenCounts, bounded_get
from .config import Arm, Workload, format_validation_error
from .errors import CapabilityNotSupported, ConfigError, EngineStartupError
from .selftest import SelftestRow

__all__ = [
    "Capabilities",
    "LaunchSpec",
    "Effective",
    "ServerStats",
    "EngineAdapter",
    "NoOptions",
    "check_arm_capabilities",
    "cli_flags",
    "first_matching_line",
    "openai_model_id",
    "FailureRule",
]


FailureRule = tuple[str, tuple[str, ...], str]  # (reason, log needles, advice for the user)


class Capabilities(BaseModel):
    """What an engine can do, declared by its adapter and printed by ``bakeoff engines``."""

    model_config = ConfigDict(frozen=True)

    speculative_methods: tuple[str, ...] = Field(("none",), description="Methods of the shared vocabulary it maps.")
    speculative_knobs: tuple[str, ...] = Field((), description="Speculative fields it maps (n_max, n_min, p_min, ...).")
    settings: tuple[str, ...] = Field((), description="Settings fields it maps to flags.")
    split_modes: tuple[str, ...] = ()
    kv_types: tuple[str, ...] = ()
    token_counts: TokenCounts = Field("final_usage_only", description=(
        "What each SSE chunk says about its tokens: usage_per_chunk (continuous_usage_stats), engine_per_chunk "
        "(the engine's own cumulative count, via chunk_token_count), one_per_event, or final_usage_only "
        "(first-event tokens are then estimated and flagged)."))
    acceptance_source: str = Field("none", description="Where drafted/accepted counts come from.")
    launch_modes: tuple[str, ...] = ("native",)
    docker_image: str | None = None
    stateful_speculators: tuple[str, ...] = Field((), description="Methods/variants whose state carries across "
                                                                 "requests, so reps are not independent.")
    fixed_length_field: Literal["ignore_eos", "min_tokens", "none"] = "none"
    tokenize_endpoint: str | None = None


@dataclass
class LaunchSpec:
    """How to start an engine: a pure description, run by core's launcher."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_path: str = "/health"
    files: dict[str, str] = field(default_factory=dict)  # relative path -> content, written before launch


@dataclass
class Effective:
    """What the engine reports it really runs with, and where that differs from what was asked."""

    values: dict[str, Any] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    version: str | None = None
    model_id: str | None = None

    def first_positive(self, keys: tuple[str, ...]) -> int | None:
        """The first positive integer among ``values[key]`` for ``keys`` (engines name the same fact differently)."""
        for key in keys:
            value = self.values.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return None


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
    source: str | None = Field(None, description="Where the draft counts came from.")
    flags: list[str] = Field(default_factory=list, description="Disagreements the adapter found (e.g. log vs JSON).")
    extra: dict[str, Any] = Field(default_factory=dict)


class NoOptions(BaseModel):
    """An engine with no engine-specific options."""

    model_config = ConfigDict(extra="forbid")


class EngineAdapter(ABC):
    """Base class of every engine adapter (built-in or plugin).

    Subclasses set :attr:`name`, :attr:`capabilities` and :attr:`Options`, and implement
    :meth:`launch_spec`. Everything else has a reasonable OpenAI-compatible default.
    """

    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    Options: ClassVar[type[BaseModel]] = NoOptions
    display_name: ClassVar[str] = ""  # how logs and errors call the engine ("llama-server"); default: name
    # (reason, needles, advice): the first rule with a needle in the log classifies a failed start, and
    # its log line is quoted. Argument errors belong first: engines print them before loading anything.
    startup_failures: ClassVar[tuple[FailureRule, ...]] = ()

    def options(self, arm: Arm, index: int | None = None) -> BaseModel:
        """Validate ``arm.options`` with this engine's Options model.

        :raises ConfigError: naming the bad key as ``arms[i].options.key``.
        """
        try:
            return self.Options.model_validate(arm.options)
        except ValidationError as exc:
            where = ("arms", index, "options") if index is not None else ("options",)
            raise ConfigError(format_validation_error(exc, f"arm {arm.name!r}", prefix=where)) from exc

    # -- before launch -----------------------------------------------------------------
    def preflight(self, arm: Arm) -> None:
        """Refuse an arm that cannot work before spending a launch on it (raise PreflightError)."""

    @abstractmethod
    def launch_spec(self, arm: Arm, port: int, workdir: Path) -> LaunchSpec:
        """Turn an arm into argv + env. Pure: no I/O beyond reading the arm."""

    def compose_service(self, arm: Arm, port: int) -> dict[str, Any]:
        """The arm as one docker compose service (``launch: compose``), published on ``127.0.0.1:port``.

        A service mapping of the compose specification: a pinned ``image``, ``command``, model files in
        ``volumes`` mounted read-only, ``ports``, a ``healthcheck`` (boot time is measured to healthy)
        and, on GPUs, ``deploy.resources.reservations.devices``. Pure: no I/O beyond resolving paths.

        :raises CapabilityNotSupported: this adapter cannot run its engine under compose.
        """
        raise CapabilityNotSupported(f"arm {arm.name!r}: {self.name} has no docker compose service "
                                     f"(launch: compose)")

    def install_hint(self) -> str:
        return f"see `bakeoff engines` for how to install {self.name}"

    def install(self, log: Callable[[str], None]) -> str:
        """Install or build the engine into bakeoff's cache; returns where it is.

        :raises CapabilityNotSupported: this adapter cannot install its engine.
        """
        raise CapabilityNotSupported(f"{self.name} has no installer; {self.install_hint()}")

    def selftest(self, log: Callable[[str], None], workdir: Path) -> list[SelftestRow]:
        """Run every speculative method this adapter maps through the installed engine (``bakeoff selftest``).

        :param log: receives progress lines.
        :param workdir: receives the run directories and engine logs.
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

    def effective_settings(self, http: httpx.Client, arm: Arm) -> Effective:
        """Read back what the engine really runs with; compare with the arm and list mismatches."""
        return Effective(model_id=openai_model_id(http))

    # -- per request ---------------------------------------------------------------------
    def request_fields(self, arm: Arm, workload: Workload) -> dict[str, Any]:
        """Engine-specific JSON fields added to every chat request."""
        return {}

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

    def chunk_token_count(self, payload: dict[str, Any]) -> int | None:
        """Cumulative generated tokens carried by one SSE payload, or None when it carries no count."""
        usage = payload.get("usage")
        return usage.get("completion_tokens") if isinstance(usage, dict) else None

    def before_request(self, http: httpx.Client) -> Any:
        """Snapshot taken just before a timed request (e.g. /metrics counters); passed to server_stats."""
        return None

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any,
                     log_text: str) -> ServerStats:
        """The server's own numbers for the request that just finished.

        :param final: the last JSON payload of the stream that carried usage (may hold engine extras).
        :param before: what :meth:`before_request` returned.
        :param log_text: engine log lines written while the request ran ('' in attach mode).
        """
        return ServerStats()


def openai_model_id(http: httpx.Client, timeout_s: float = SETUP_TIMEOUT_S) -> str | None:
    """The first model id from ``/v1/models``; None if the server does not list one within ``timeout_s``."""
    try:
        data = bounded_get(http, "/v1/models", timeout_s).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


def check_arm_capabilities(adapter: EngineAdapter, arm: Arm) -> None:
    """Refuse, before launch, any knob the engine lacks: a silent no-op would mislabel the arm.

    :raises CapabilityNotSupported: naming the field and what the engine supports.
    """
    caps = adapter.capabilities
    spec = arm.speculative
    if spec.method not in caps.speculative_methods:
        raise CapabilityNotSupported(
            f"arm {arm.name!r}: {adapter.name} has no speculative method {spec.method!r}; "
            f"it supports: {', '.join(caps.speculative_methods)}")
    for knob in sorted(spec.set_fields() - set(caps.speculative_knobs)):
        raise CapabilityNotSupported(
            f"arm {arm.name!r}: speculative.{knob} is not a knob {adapter.name} has; it would be ignored, "
            f"so it is refused (supported: {', '.join(caps.speculative_knobs) or 'none'})")
    if not arm.attached:
        for knob in sorted(arm.settings.set_fields() - set(caps.settings)):
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
