"""The ``live:`` and ``phases:`` sections of a bakeoff file: the service serving real traffic, and live knobs.

``live:`` names the one service bakeoff may stop and restore; without it nothing is ever stopped.
``phases:`` turns a run into timed phases against one server that stays up: each knob's ``apply``
command, then its ``revert``, with a baseline phase before, between and after the knobs. See docs/live.md.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .bounds import MAX_DAY_S, MAX_WEEK_S

__all__ = ["BASELINE", "KernelLogCheck", "Knob", "LiveService", "Phases"]

BASELINE = "baseline"  # the phase name between knobs; no knob may take it
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class _Strict(BaseModel):
    # as schema.Strict: NaN passes every bound check, and no live setting needs it or infinity
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _words(v: object) -> object:
    """YAML reads ``[nvidia-smi, -pl, 400]`` with a number in it; an argv holds strings."""
    if isinstance(v, list):
        return [str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x for x in v]
    return v


def _argv(v: list[str] | None) -> list[str] | None:
    if v is not None and (not v or not v[0]):
        raise ValueError("give a command as a non-empty list of arguments, e.g. [systemctl, stop, llama]")
    return v


class LiveService(_Strict):
    """The service that serves real traffic now: stopped for the run, restored after it (or by the watchdog)."""

    kind: Literal["command", "compose", "docker", "systemd"] = Field(
        description="How it runs: a stop/start command pair, a compose service, a docker container, a systemd unit.")
    name: str = Field(description="Container, compose service or unit name (a label for kind 'command').")
    stop: list[str] | None = Field(None, description="argv that stops it (required for kind 'command'; "
                                                     "overrides the default for the others).")
    start: list[str] | None = Field(None, description="argv that starts it again; must return once it is started "
                                                      "(required for kind 'command').")
    health: str = Field(description="Health URL; HTTP 200 means healthy, e.g. http://127.0.0.1:8094/health.")
    model: str | None = Field(None, description="Served model name; healthy also means /v1/models lists it.")
    port: int | None = Field(None, ge=1, le=65535, description="Port it serves on (no arm may take it; "
                                                               "`bakeoff promote` reuses it).")
    watchdog_s: float = Field(1800.0, gt=0, le=MAX_WEEK_S, description="Deadline: the watchdog restores the "
                              "service this many seconds after the run started, whatever bakeoff is doing.")
    compose_file: str | None = Field(None, description="kind compose: the compose file (default: compose's own "
                                                       "lookup in the current directory).")
    record: list[str] | None = Field(None, description="argv whose output records the service's configuration "
                                                       "(default per kind: docker inspect, systemctl show, ...).")
    stop_timeout_s: float = Field(120.0, gt=0, le=MAX_DAY_S, description="Limit for the stop command and for the "
                                  "health URL to stop answering.")
    restore_timeout_s: float = Field(300.0, gt=0, le=MAX_DAY_S, description="Limit for the start command and for "
                                     "the service to be healthy again.")
    if_unhealthy: Literal["refuse", "proceed"] = Field("refuse", description="When the service is unhealthy "
                                                                             "before the run: refuse to start, "
                                                                             "or proceed anyway.")

    _numbers_as_words = field_validator("stop", "start", "record", mode="before")(_words)

    @field_validator("stop", "start", "record")
    @classmethod
    def _argv_ok(cls, v: list[str] | None) -> list[str] | None:
        return _argv(v)

    @field_validator("health")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"give an http(s) URL such as http://127.0.0.1:8094/health, not {v!r}")
        return v

    @model_validator(mode="after")
    def _commands_for_command_kind(self) -> LiveService:
        if self.kind == "command" and (self.stop is None or self.start is None):
            raise ValueError("kind 'command' needs both 'stop' and 'start' (argv lists)")
        return self

    @property
    def base_url(self) -> str:
        parts = urlsplit(self.health)
        return f"{parts.scheme}://{parts.netloc}"


class Knob(_Strict):
    """A setting changed on a running server: ``apply`` before its phase, ``revert`` after it, always."""

    name: str = Field(description="Phase name (a column in the phase table).")
    apply: list[str] = Field(description="argv that applies the setting, e.g. [nvidia-smi, -lgc, '1800'].")
    revert: list[str] = Field(description="argv that restores the default, e.g. [nvidia-smi, -rgc].")

    _numbers_as_words = field_validator("apply", "revert", mode="before")(_words)

    @field_validator("apply", "revert")
    @classmethod
    def _argv_ok(cls, v: list[str]) -> list[str]:
        return _argv(v) or v

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits, '.', '_', '+' or '-'")
        if v == BASELINE:
            raise ValueError(f"{BASELINE!r} is the name of the phases between knobs")
        return v


class KernelLogCheck(_Strict):
    """A kernel-log check during each phase: a new line matching ``pattern`` stops the run (after a revert)."""

    _numbers_as_words = field_validator("command", mode="before")(_words)

    command: list[str] = Field(default_factory=lambda: ["dmesg"], description="argv printing the kernel log "
                                                                             "(dmesg may need root or "
                                                                             "kernel.dmesg_restrict=0).")
    pattern: str = Field(r"NVRM: Xid", description="Regular expression of a bad line (NVIDIA Xid errors by default).")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return v


class Phases(_Strict):
    """Timed phases against one server that stays up: baseline, knob, baseline, knob, ..., baseline."""

    server: str | None = Field(None, description="The arm whose server stays up (an arm with url: for the live "
                                                 "server, or one bakeoff launches); default: the first arm.")
    knobs: list[Knob] = Field(min_length=1, description="Settings, each in its own phase.")
    duration_s: float = Field(180.0, gt=0, le=MAX_DAY_S, description="Length of every phase (requests are sent "
                              "until it ends; at least one round of prompts x modes).")
    probe_interval_s: float = Field(10.0, gt=0, le=MAX_DAY_S,
                                    description="Health probe (and kernel-log check) interval.")
    kernel_log: KernelLogCheck | None = Field(None, description="Kernel-log check at every probe, e.g. NVIDIA Xid.")
    command_timeout_s: float = Field(60.0, gt=0, le=MAX_DAY_S, description="Limit for each apply/revert command.")
    watchdog_s: float | None = Field(None, gt=0, le=MAX_WEEK_S, description="Deadline for the watchdog to revert "
                                     "(default: the phases' length x 1.5 + 5 min).")

    @model_validator(mode="after")
    def _unique_knobs(self) -> Phases:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError("two knobs have the same name")
        return self

    @property
    def phase_names(self) -> list[tuple[str, str]]:
        """(phase id, setting) in order: baseline, knob, baseline, ..., baseline."""
        out = [(f"p00-{BASELINE}", BASELINE)]
        for knob in self.knobs:
            out.append((f"p{len(out):02d}-{knob.name}", knob.name))
            out.append((f"p{len(out):02d}-{BASELINE}", BASELINE))
        return out

    def deadline_s(self) -> float:
        return self.watchdog_s or len(self.phase_names) * self.duration_s * 1.5 + 300
