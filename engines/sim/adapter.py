"""``sim``: a misbehaving engine, for proving that bakeoff keeps every sample and leaves nothing running.

The adapter launches ``server.py`` (standard library only) as a real process through core's
launcher, so a SIGKILL, a stall or a crash on start is exactly what a broken engine would do. What the
server does comes from the arm's ``options:`` (validated by :class:`SimOptions`): token packing and
pacing, wrong or missing usage, a stall, a reset, a self-kill, malformed SSE, HTTP errors, a slow boot,
a crash on start with a given log line.

Like llama.cpp it claims one token per SSE event, so ``tokens_per_event > 1`` shows that the accounting
audit flags an engine that packs tokens. It reports its own true token count beside ``usage`` (as
llama.cpp's ``timings.predicted_n``), so wrong usage is caught twice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bakeoff.core import (
    Arm,
    Capabilities,
    ConfigError,
    EngineAdapter,
    EngineLog,
    FailureRule,
    LaunchInputs,
    LaunchSpec,
    MethodKnobs,
    Reader,
    ServerStats,
    StructuredOutputs,
    sample_flag,
)

__all__ = ["SimAdapter", "SimOptions", "SERVER"]

SERVER = Path(__file__).with_name("server.py")

# The sim's own startup failures (reason, needles, advice), in the words a user can act on.
STARTUP_FAILURES: tuple[FailureRule, ...] = (
    ("port-in-use", ("couldn't bind", "Address already in use"), "the port is taken by another process"),
    ("unknown-flag", ("unrecognized arguments",), "the sim does not accept a flag it was given"),
    ("missing-api-key", ("an API key is required",), "set the environment variable named by api_key_env"),
    ("out-of-memory", ("out of memory",), "the (simulated) engine ran out of memory"),
    ("crashed", ("E sim:",), "the sim crashed on start as configured"),
)


class SimOptions(BaseModel):
    """How the simulated engine behaves (``arms[i].options``)."""

    # NaN passes every bound (it compares false: min([nan]) <= 0 is false) and the server then dies mid-stream;
    # infinity sleeps forever: no behaviour of the sim needs either
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["sim"] = "sim"
    tokens_per_event: int = Field(1, ge=1, description="Tokens packed into each SSE event.")
    ttft_ms: float = Field(0.0, ge=0, description="Delay before the first token event.")
    itl_ms: float = Field(0.0, ge=0, description="Delay between token events.")
    usage: Literal["ok", "missing", "wrong"] = Field(
        "ok", description="ok; missing: no usage at all; wrong: final usage.completion_tokens off by usage_offset.")
    usage_offset: int = Field(3, description="How far wrong usage is off (not 0).")
    fault: Literal["none", "stall", "reset", "kill", "malformed", "http"] = Field(
        "none", description="stall: stop sending for stall_s; reset: TCP RST; kill: SIGKILL itself; "
                            "malformed: a truncated JSON data line; http: answer http_status instead of a stream.")
    fault_after_tokens: int = Field(0, ge=0, description="Tokens streamed before a mid-stream fault.")
    fault_on_requests: list[int] | None = Field(
        None, description="Chat requests that get the fault, 1-based, the warm-up included; all when unset.")
    stall_s: float = Field(3600.0, gt=0, description="How long a stall lasts.")
    http_status: int = Field(500, ge=400, le=599, description="Status of fault 'http' (500, 503, ...).")
    boot_delay_s: float = Field(0.0, ge=0, description="Answer 503 'Loading model' this long after start.")
    crash_on_start: str | None = Field(None, description="Log this line and exit instead of serving.")
    crash_exit_code: int = Field(1, ge=1, le=255, description="Exit status of crash_on_start.")
    require_api_key: bool = Field(False, description="Refuse requests without the key from arm.api_key_env.")
    model_id: str = Field("sim", description="Model id served on /v1/models.")
    prompt_tokens: int = Field(20, ge=0, description="usage.prompt_tokens reported.")
    itl_ms_per_stream: float = Field(0.0, ge=0, description="Added to itl_ms for every other request in flight "
                                     "(an engine fast at one stream that slows as streams are added).")
    ttft_ms_per_stream: float = Field(0.0, ge=0, description="Planted capacity model: added to ttft_ms for every "
                                      "other request in flight (engines/sim/capacity.py).")
    capacity_streams: int | None = Field(None, ge=1, description="Planted cliff: above this many requests in "
                                         "flight every first token takes capacity_cliff times longer.")
    structured_capacity_streams: int | None = Field(None, ge=1, description="Planted cliff of a request under a "
                                                    "grammar (response_format or tools): above this many requests "
                                                    "in flight (None: capacity_streams).")
    capacity_cliff: float = Field(1.0, ge=1, description="The planted cliff's factor.")
    grammar_answer: str | None = Field(None, min_length=1, description="Answer a request carrying response_format "
                                       "or tools with this text, a character a token, finishing 'stop' (None: "
                                       "words, never a valid structured answer).")
    admission_ms: float = Field(0.0, ge=0, description="Wait before counting the requests in flight for TTFT "
                                "(so a batch released together sees itself).")
    slow_requests: int = Field(0, ge=0, description="The first chat requests (warm-up included) stream at half "
                                                    "speed, as an engine still warming up does.")
    draft_per_event: int = Field(2, ge=0, description="Speculative arm: draft tokens reported per token event "
                                                      "(half accepted).")
    drafts_under_grammar: bool = Field(True, description="Speculative arm: false drafts nothing on a request "
                                                         "with response_format or tools (speculation disengaged).")

    launch_speeds: list[float] | None = Field(
        None, description="Each launch draws its speed from this list (e.g. [1.0, 0.5]: some launches come up at "
                          "half speed and stay there), as engines with a fast and a slow launch state do.")
    launch_seed: int = Field(0, description="Seed of the launch_speeds draws (the k-th launch of an arm draws "
                                            "the same speed for the same seed).")

    @model_validator(mode="after")
    def _consistent(self) -> SimOptions:
        if self.launch_speeds is not None and (not self.launch_speeds or min(self.launch_speeds) <= 0):
            raise ValueError("launch_speeds needs at least one speed, each above 0")
        if self.usage == "wrong" and self.usage_offset == 0:
            raise ValueError("usage 'wrong' needs a usage_offset other than 0")
        if self.fault_on_requests is not None and any(n < 1 for n in self.fault_on_requests):
            raise ValueError("fault_on_requests counts requests from 1")
        return self


class SimReader(Reader):
    """The sim's own counts, in an extra ``sim`` object of the final chunk."""

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        sim = (final or {}).get("sim") or {}
        generated = sim.get("generated_tokens")
        stats = ServerStats(completion_tokens=generated, source="sim", drafted=sim.get("drafted"),
                            accepted=sim.get("accepted"), drafts=sim.get("drafts"))
        if final is not None and generated is None:
            stats.flags.append(sample_flag("server-count-missing").line())
        return stats


class SimAdapter(EngineAdapter[SimOptions]):
    name = "sim"
    description = "a configurable misbehaving OpenAI-compatible engine, for tests (standard library only)"
    capabilities = Capabilities(
        speculative={"none": MethodKnobs(), "ngram": MethodKnobs()},  # simulated counts only (server.py)
        token_counts="one_per_event",
        acceptance_source="sim",
        launch_modes=("native",),
        fixed_length_field="ignore_eos",  # it always streams max_tokens tokens; the field is accepted
    )
    display_name = "sim"
    startup_failures = STARTUP_FAILURES
    reader = SimReader()
    # accepted, answered with words (never valid) or with options.grammar_answer
    structured = StructuredOutputs(kinds=("json_schema", "tool_call"))

    def preflight(self, arm: Arm) -> None:
        options = self.options(arm)
        if options.require_api_key and not arm.api_key_env:
            raise ConfigError(f"arm {arm.name!r}: options.require_api_key needs api_key_env (the name of the "
                              f"environment variable holding the key)")

    def with_served_name(self, arm: Arm, name: str) -> Arm:
        return arm.model_copy(update={"options": {**arm.options, "model_id": name}})

    def model_ref(self, model: str) -> str:
        return model  # the sim loads no model: the name is all it needs

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        options = self.options(arm)
        behaviour = {**options.model_dump(exclude={"kind", "launch_speeds", "launch_seed"}),
                     "speculative": arm.speculative.enabled}
        argv = [sys.executable, "-u", str(SERVER), "--host", arm.settings.host, "--port", str(launch.port),
                "--behaviour", json.dumps(behaviour, separators=(",", ":"))]
        if options.launch_speeds:  # the server draws its speed, counting this arm's launches in its directory
            argv += ["--launch-speeds", ",".join(map(str, options.launch_speeds)),
                     "--launch-seed", str(options.launch_seed),
                     "--launch-counter", str(launch.workdir / "sim-launches")]
        if options.require_api_key and arm.api_key_env:
            argv += ["--api-key-env", arm.api_key_env]  # the variable's name; the key stays in the environment
        argv += arm.extra_args
        return LaunchSpec(argv=argv, env=dict(arm.env), ready_path="/health")


