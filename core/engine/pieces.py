"""The declared pieces of an adapter, one concern each, the way ``installer`` and ``compose`` are.

An adapter is its launch translation plus a few class attributes, each a small object with conservative
defaults, so the shortest adapter (engines/openai) declares none of them:

- :class:`Reader` (``reader``): everything read back from the engine: the effective settings after start,
  startup-log mismatches, the stream options and each chunk's token count, the snapshot before a timed
  request, the server's own numbers after it, and prompt-token counts by the engine's tokenizer.
- :class:`PrefixCache` (``prefix_cache``): how a sessions workload turns the engine's prefix cache on (request
  fields, or a launch switch) and why an arm cannot (the user turned the switch off).
- :class:`StructuredOutputs` (``structured``): the structured request kinds the engine takes, and why an arm,
  as launched, cannot answer them.
- :class:`NMaxSchedule` (``n_max_schedule``, None: the engine takes none): a per-batch-size draft length.
- :class:`Witness` (``witness``): the second witness of the token count (the engine naming the tokens it sends,
  on one request in so many, and its tokenizer counting the answer). Core counts the requests, per arm start.
- :class:`Selftest` (``selftest``, None: no self-test): the cases ``bakeoff selftest`` runs.

No piece keeps state: one instance is shared by every arm of its engine, so every method is given the arm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from ..analysis.acceptance import acceptance_rate
from ..common.errors import CapabilityNotSupported
from ..config.schema import Arm, Prompt, StructuredKind
from .client import SETUP_TIMEOUT_S, TokenCounts, bounded_get
from .effective import Effective
from .readback import EngineLog

__all__ = [
    "GPU_LOG_TRAPS",
    "NMaxSchedule",
    "PrefixCache",
    "Reader",
    "SelftestCase",
    "SelftestRow",
    "ReferenceBench",
    "Selftest",
    "ServerStats",
    "StructuredOutputs",
    "Witness",
    "first_matching_line",
    "openai_model_id",
]

# Log lines that start fine but cost speed on several GPUs (what, needles): each becomes a mismatch.
GPU_LOG_TRAPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no GPU peer-to-peer access (all-reduce goes through host memory)",
     ("lacks GPU P2P capability", "peer access is not supported", "P2P is not supported", "peer access not available")),
)


def first_matching_line(log_text: str, needles: tuple[str, ...]) -> str | None:
    """The first log line containing any of ``needles``, stripped; for quoting in errors."""
    for line in log_text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return None


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


class Reader:
    """What an engine says about itself, read back: one piece for every read-back an adapter may need.

    The defaults fit a plain OpenAI-compatible server: its model id from ``/v1/models``, usage in the final
    chunk, no snapshot and no server numbers.
    """

    def effective_settings(self, http: httpx.Client, arm: Arm, log: EngineLog) -> Effective:
        """Read back what the engine really runs with: fill :class:`Effective`'s common fields (and their
        ``sources``) with what the engine reports, ``raw`` with everything read, and ``mismatches`` with the
        checks only this engine has. ``log.text()`` is the engine's log since it started ('' when attached).
        Core compares the common fields with the arm (:func:`~bakeoff.core.engine.checks.read_effective`)."""
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

        The default knows engine-neutral multi-GPU traps (:data:`GPU_LOG_TRAPS`); readers add their own.
        """
        out = []
        for what, needles in GPU_LOG_TRAPS:
            line = first_matching_line(log_text, needles)
            if line:
                out.append(f"{what}: {line}")
        return out

    def stream_options(self, token_counts: TokenCounts) -> dict[str, Any]:
        """The request's ``stream_options``: usage always, per chunk where the engine counts that way."""
        opts: dict[str, Any] = {"include_usage": True}
        if token_counts == "usage_per_chunk":
            opts["continuous_usage_stats"] = True
        return opts

    def chunk_token_count(self, payload: dict[str, Any]) -> object:
        """Cumulative generated tokens carried by one SSE payload, or None when it carries no count."""
        usage = payload.get("usage")
        return usage.get("completion_tokens") if isinstance(usage, dict) else None

    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        """Prompt tokens the engine will process for these chat messages, chat template included,
        counted by the engine's own tokenizer (depth sweeps pad prompts to exact sizes with it).

        :param template_kwargs: ``chat_template_kwargs`` the timed request will carry.
        :raises CapabilityNotSupported: the engine has no way to count them.
        :raises MeasurementError: the engine's tokenizer endpoint failed.
        """
        raise CapabilityNotSupported("this engine cannot count prompt tokens with its own tokenizer, "
                                     "so it cannot run a depth sweep")

    def before_request(self, http: httpx.Client) -> Any:
        """Snapshot taken just before a timed request (e.g. /metrics counters); passed to server_stats."""
        return None

    def server_stats(self, http: httpx.Client, final: dict[str, Any] | None, before: Any, log: EngineLog, *,
                     arm: Arm | None = None) -> ServerStats:
        """The server's own numbers for the request that just finished.

        :param final: the last JSON payload of the stream that carried usage (may hold engine extras).
        :param before: what :meth:`before_request` returned.
        :param log: the engine log written while the request ran (``log.text()``; '' when attached), and
            ``log.wait_for(needle)`` for a per-request line written just after the stream (no wait when
            the log is not this request's alone).
        :param arm: the arm the request was for (None: not known, e.g. a replayed capture).
        """
        return ServerStats()


class PrefixCache:
    """How a sessions workload turns the engine's prefix cache on. The default: the server's own default
    (an attached OpenAI-compatible server), nothing refused."""

    def request_fields(self, arm: Arm) -> dict[str, Any]:
        """Engine-only request fields that turn the prefix cache on for a session's turns (they replace the
        cache-busting ones of ``request_fields``), recorded in the arm's attempt."""
        return {}

    def launch(self, arm: Arm) -> Arm:
        """The arm as a sessions workload launches it: an engine whose prefix cache is a launch switch turns it
        on here (the plan's arm, so its fingerprint, argv.txt and read-back show it)."""
        return arm

    def problem(self, arm: Arm) -> str | None:
        """Why this arm cannot replay sessions with its prefix cache on (a launch switch the user turned off),
        or None. A sessions workload refuses the arm before anything starts."""
        return None


@dataclass(frozen=True)
class StructuredOutputs:
    """The structured requests the engine takes in OpenAI's shape: json_schema (response_format with a schema,
    decoded under a grammar) and tool_call (tools and tool_choice); a prompt of another kind is refused before
    launch. Default: none."""

    kinds: tuple[StructuredKind, ...] = ()

    def problem(self, arm: Arm, kinds: Sequence[str]) -> str | None:
        """Why this arm, as launched, cannot answer these kinds although the engine takes them (a launch flag the
        engine needs for them is missing), or None. Refused before anything starts."""
        return None


class NMaxSchedule:
    """A per-batch-size n_max schedule (``bakeoff tune``'s compile), for an engine that takes one."""

    def apply(self, arm: Arm, schedule: list[list[int]]) -> Arm:
        """The arm with ``schedule``: entries ``[first, last, n_max]`` over inclusive batch-size ranges, first
        starting at 1; the launch command then carries it.

        :raises CapabilityNotSupported: the engine, as installed for this arm, takes no such schedule (say why).
        """
        raise CapabilityNotSupported("this engine takes no per-batch-size n_max schedule")


class Witness:
    """The second witness of the token count (core/measure/invariants.py). Default: none.

    Core counts the arm's requests on each engine start (timed and warm-up alike) and adds :meth:`fields` to
    one in every :meth:`every`.
    """

    def every(self, arm: Arm) -> int:
        """One request in this many asks the engine to name the tokens it sends; 0: none."""
        return 0

    def fields(self, arm: Arm) -> dict[str, Any]:
        """The request fields that ask for it (llama.cpp's ``logprobs``, vLLM's ``return_token_ids``)."""
        return {}

    def for_request(self, arm: Arm, index: int) -> dict[str, Any]:
        """What request ``index`` (0 first) of an engine start adds: :meth:`fields` on one in every :meth:`every`,
        the first included. Core calls it with its own count; adapters leave it as it is."""
        every = self.every(arm)
        return self.fields(arm) if every and index % every == 0 else {}

    def count_output_tokens(self, http: httpx.Client, text: str) -> int | None:
        """The delivered answer's tokens, counted by the engine's own tokenizer after the request, off the clock:
        the second witness of ``usage.completion_tokens`` where the stream names no token one by one. None: the
        engine has no tokenizer endpoint, or it failed (no witness, never an error)."""
        return None


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


class ReferenceBench:
    """The engine's own benchmark of the same build on the same model (llama.cpp: llama-bench), printed beside an
    arm's decode rate by ``bakeoff conform --llama-bench``."""

    def reference(self, adapter: Any, arm: Arm, depth: int, n_gen: int, server_tps: list[float | None],
                  log: Callable[[str], None]) -> dict[str, Any]:
        """The benchmark's decode rate at ``depth`` prompt tokens and ``n_gen`` generated, with the settings of
        ``arm``, and the server's share of it (``server_tps``: the arm's measured decode rates)."""
        raise NotImplementedError


class Selftest:
    """``bakeoff selftest``: the cases an engine runs to prove every speculative method it maps."""

    def cases(self, log: Callable[[str], None]) -> tuple[list[SelftestCase], list[str]]:
        """One case per speculative method the adapter maps, usually on tiny models the piece provides, and the
        mapped methods it has no case for (each becomes a failed row). Core runs the cases through the normal
        protocol; the piece only declares them.

        :param log: receives progress lines (e.g. while synthesizing models).
        """
        return [], []
