"""One timed request = one Sample, stored as a line of ``samples.jsonl``.

Field descriptions say which clock and which event each timing comes from (DESIGN.md, "Measurement
definitions"). A failed request is a sample with ``status="error"``, never a lost exception.

The fields are declared in named sections (:data:`SAMPLE_SECTIONS`: the request, its stream, the server's own
counts, acceptance, ...), one small model each, and ``Sample`` is all of them at once: a line stays one flat
JSON object, the keys in the order they always had, so pandas reads it as it is. The published schema of a line
(:func:`sample_json_schema`, ``bakeoff schema samples``) names the same sections.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..host.telemetry import GpuSample
from .flags import Flag, has_flag

__all__ = [
    "SAMPLE_SECTIONS",
    "SCHEMA_VERSION",
    "Sample",
    "SampleAcceptance",
    "SampleGpu",
    "SampleHarness",
    "SampleLoad",
    "SampleOutput",
    "SamplePhase",
    "SamplePoint",
    "SampleRequest",
    "SampleServer",
    "SampleStream",
    "SampleStructured",
    "SampleTurns",
    "sample_json_schema",
]

# A line without schema_version was written by bakeoff 0.1 and reads as version 1 (core/results/sample_lines.py).
SCHEMA_VERSION = 1


class SampleRequest(BaseModel):
    """Which request this is: run, arm, engine, prompt, sampling mode, repetition and pass; how it ended, and the
    flags every accounting disagreement or caveat left on it."""

    schema_version: int = Field(SCHEMA_VERSION, description="The sample schema this line is written in (absent: 1).")
    run_id: str = ""
    arm: str
    engine: str
    prompt: str
    mode: str
    rep: int = Field(description="Repetition index within a pass (0-based).")
    pass_index: int = Field(0, description="Interleaved pass (0-based).")
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    flags: list[str] = Field(default_factory=list, description="Every accounting disagreement or caveat.")
    started_at: float = Field(0.0, description="time.time() when the request was sent (wall clock, seconds).")


class SampleStream(BaseModel):
    """The client's own account of the stream (core/measure/definitions.py ``account``): the true token counts
    from usage, the events and reads they came in, and the timings and rates drawn from them."""

    # true token accounting
    completion_tokens: int | None = Field(None, description="N = usage.completion_tokens (the true count).")
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens.")
    cached_tokens: int | None = Field(None, description="Prompt tokens served from the engine's prefix cache: "
                                      "usage.prompt_tokens_details.cached_tokens, else the engine's own count "
                                      "(llama.cpp timings.cache_n).")
    usage_present: bool = False
    reasoning_tokens: int | None = Field(None, description="usage.completion_tokens_details.reasoning_tokens (None: "
                                         "not reported).")
    n_first: int | None = Field(None, description=(
        "Tokens before the decode window: those of the network read that carried the first token-bearing event "
        "(usually that event alone)."))
    n_first_source: Literal["usage", "one-per-event", "estimated"] | None = Field(
        None, description="usage: the engine's per-chunk count; estimated: the first event's share of the text.")
    events: int = Field(0, description="SSE data events received (excluding [DONE]).")
    reads: int = Field(0, description="Network reads the stream arrived in (events sharing a read arrived together).")
    token_events: int = Field(0, description="Events carrying output tokens.")
    max_tokens_per_event: int | None = None
    mean_tokens_per_event: float | None = None

    # timings (perf_counter_ns on arrival of each SSE event, converted to seconds)
    ttft_s: float | None = Field(None, description="t_first - t_send: first event carrying output tokens.")
    decode_s: float | None = Field(None, description="t_last - t_first: first to last token-bearing event.")
    e2e_s: float | None = Field(None, description="t_done - t_send: stream closed.")
    decode_tps: float | None = Field(None, description="(N - n_first) / (t_last - t_first).")
    prefill_tps: float | None = Field(None, description="Uncached prompt tokens / TTFT.")
    event_count_decode_tps: float | None = Field(
        None, description="What a client counting SSE events as tokens would report: (token_events-1)/decode_s.")


class SampleServer(BaseModel):
    """The engine's own figures for the request, and the witness: the output counted apart from usage."""

    server_completion_tokens: int | None = None
    server_cached_tokens: int | None = Field(None, description="The engine's own count of prompt tokens served from "
                                             "its cache (llama.cpp timings.cache_n), beside usage's cached_tokens.")
    witness_tokens: int | None = Field(
        None, description="Output tokens the stream named one by one (token ids or logprobs entries), else the "
                          "delivered text's tokens by the engine's tokenizer, counted apart from usage; None: no "
                          "witness (measure/invariants.py).")
    witness_source: str | None = Field(None, description="What witness_tokens counted: token_ids, logprobs, or "
                                                         "tokenize (the delivered text, after the request).")
    server_decode_tps: float | None = None
    server_prefill_tps: float | None = None


class SampleAcceptance(BaseModel):
    """Speculative decoding: drafted and accepted tokens, draft steps, the rates drawn from them, and why a
    figure is missing or how it was derived (core/analysis/acceptance.py)."""

    drafted: int | None = Field(None, description="Draft tokens proposed (0: speculation proposed nothing).")
    accepted: int | None = None
    drafts: int | None = None
    acceptance: float | None = Field(None, description="accepted / drafted.")
    mean_accepted_len: float | None = Field(None, description="1 + accepted / drafts.")
    accepted_per_position: list[int] | None = Field(
        None, description="Accepted draft tokens by position in the draft (0 first), where the engine counts them.")
    acceptance_per_position: list[float] | None = Field(
        None, description="Position i (0 first): accepted_per_position[i] / drafts, the fraction of draft steps "
                          "whose (i+1)-th draft token was accepted.")
    accepted_histogram: list[int] | None = Field(
        None, description="Draft steps that accepted 0, 1, 2, ... draft tokens (index = tokens accepted).")
    acceptance_unavailable: dict[str, str] = Field(
        default_factory=dict,
        description="Acceptance field left None while speculating -> why (core/analysis/acceptance.py).")
    acceptance_derived: dict[str, str] = Field(
        default_factory=dict, description="Acceptance field computed rather than read from the engine -> how.")
    acceptance_source: str | None = None


class SampleOutput(BaseModel):
    """What came back: a hash and the length of the text, and why generation stopped."""

    output_sha256: str | None = None
    output_chars: int | None = None
    finish_reason: str | None = None


class SamplePoint(BaseModel):
    """The swept point the request measured: output length, prompt depth (absent in samples written before
    sweeps existed)."""

    max_tokens: int | None = Field(None, description="max_tokens requested (an output-length sweep varies it).")
    depth: int | None = Field(None, description="Depth sweep: target prompt tokens, chat template included.")
    needle_found: bool | None = Field(None, description="Depth sweep with needle: the hidden code was in the answer.")


class SampleLoad(BaseModel):
    """Load points: streams sent at once (a concurrency level) or requests on an open-loop schedule (a rate),
    and when each request was due and sent."""

    concurrency: int | None = Field(None, description="Concurrency sweep: streams sent at once (None: not a sweep).")
    batch_id: str | None = Field(None, description="Concurrency sweep: the batch of simultaneous streams; open-loop: "
                                                   "the point's requests.")
    batch_wall_s: float | None = Field(
        None, description="Concurrency sweep: first t_send to last t_done of the batch; open-loop: first due time "
                          "to last t_done of the point (perf_counter_ns, seconds).")

    rate: float | None = Field(None, description="Open-loop point: requests per second scheduled (None: not one).")
    scheduled_s: float | None = Field(None, description="Open-loop: when this request was due, seconds after the "
                                      "point's first request was due.")
    send_lag_s: float | None = Field(None, description="Open-loop: t_send - the time it was due (perf_counter_ns): "
                                     "how long the client's own backlog held it.")
    ttft_sched_s: float | None = Field(None, description="Open-loop: t_first - the time it was due (TTFT counted "
                                       "from the schedule, no coordinated omission).")
    e2e_sched_s: float | None = Field(None, description="Open-loop: t_done - the time it was due.")


class SampleTurns(BaseModel):
    """Multi-turn (sessions workload): the conversation and the turn this request was."""

    session: str | None = Field(None, description="Sessions workload: the session this turn belongs to.")
    turn: int | None = Field(None, description="Sessions workload: the turn's index in its session (0 first).")


class SamplePhase(BaseModel):
    """Live-knob phase runs: the phase the request was timed in."""

    phase: str | None = Field(None, description="Live-knob phase run: the phase id (arm is the knob or 'baseline').")


class SampleStructured(BaseModel):
    """Structured requests (workload.structured, or a prompt with response_format / tools): the constraint,
    whether the answer met it, and the longest stall mid-answer."""

    structured: Literal["json_schema", "tool_call"] | None = Field(
        None, description="The request's constraint: json_schema (response_format) or tool_call (tools).")
    valid: bool | None = Field(None, description="Structured: the answer parsed and validated against its "
                                                 "schema (tool call: a declared tool, arguments valid against "
                                                 "its parameters).")
    invalid_reason: str | None = Field(None, description="Structured: why the answer is not valid.")
    max_gap_s: float | None = Field(None, description="Structured: the longest pause between two token events "
                                                      "mid-answer (flagged stall beyond the workload's threshold).")


class SampleHarness(BaseModel):
    """The noise guard: what bakeoff's own reader cost and how it stamped arrivals, and the machine's other load."""

    client_cpu_s: float | None = Field(
        None, description="CPU seconds bakeoff's recording thread used from send to close (harness self-cost).")
    arrival_clock: Literal["kernel", "user"] | None = Field(
        None, description="What stamped each event's arrival: kernel (Linux receive timestamps, immune to the "
                          "reader's wake-up latency) or user (the clock read when the read returned).")
    client_lag_s: float | None = Field(
        None, description="Longest time bakeoff's reader was away from the socket between two reads (flagged "
                          "harness-lag above 1 % of the decode window).")
    foreign_cpu_cores: float | None = Field(
        None, description="Average cores used by processes other than the engine and bakeoff during the request.")


class SampleGpu(BaseModel):
    """GPU telemetry (NVML; None on machines without one, and for concurrency batches)."""

    gpu: GpuSample | None = Field(None, description="Energy, power, clocks, temperature, VRAM and throttle reasons "
                                                    "of the watched GPUs during this request.")


# The sections in the order of a line's keys. Pydantic collects a model's fields from its bases last to first,
# so Sample lists them in reverse: its fields (and every line's keys) run in this order, as they always did.
SAMPLE_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("request", SampleRequest),
    ("stream", SampleStream),
    ("server", SampleServer),
    ("acceptance", SampleAcceptance),
    ("output", SampleOutput),
    ("point", SamplePoint),
    ("load", SampleLoad),
    ("multi_turn", SampleTurns),
    ("phase", SamplePhase),
    ("structured", SampleStructured),
    ("harness", SampleHarness),
    ("gpu", SampleGpu),
)


class Sample(SampleGpu, SampleHarness, SampleStructured, SamplePhase, SampleTurns, SampleLoad, SamplePoint,
             SampleOutput, SampleAcceptance, SampleServer, SampleStream, SampleRequest):
    """One timed request: every section's fields, flat (:data:`SAMPLE_SECTIONS`)."""

    model_config = ConfigDict(extra="forbid")

    def has_flag(self, name: str | Flag) -> bool:
        """Whether this sample carries the flag ``name`` (core/results/flags.py; an undeclared name raises)."""
        return has_flag(self.flags, name)


def sample_json_schema() -> dict[str, Any]:
    """The JSON schema of one samples.jsonl line (JSON Schema 2020-12), its fields in named sections.

    The line is one flat object; the schema is the ``allOf`` of one subschema per section (``$defs``, titled by
    the section's name), and its own ``properties`` list every key with its section, so that
    ``additionalProperties: false`` refuses a key no section declares (``unevaluatedProperties`` would say the
    same, at about 2.5 times the cost of validating a line). It describes what this bakeoff reads: a field added
    after a line was written has a default, so older lines stay valid, and a line without ``schema_version`` is
    version 1.
    """
    defs: dict[str, Any] = {}
    parts: list[dict[str, Any]] = []
    keys: dict[str, Any] = {}
    for name, section in SAMPLE_SECTIONS:
        schema = section.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        schema["title"] = name
        schema["description"] = " ".join(inspect.cleandoc(section.__doc__ or "").split())
        defs[section.__name__] = schema
        parts.append({"$ref": f"#/$defs/{section.__name__}"})
        keys.update({key: {"$comment": f"section {name}"} for key in section.model_fields})
    # the versions this schema describes: a newer line is refused by the reader, its fields may mean other things
    defs[SampleRequest.__name__]["properties"]["schema_version"].update(minimum=1, maximum=SCHEMA_VERSION)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "bakeoff sample line (samples.jsonl)",
        "description": "One timed request, one line of samples.jsonl: a flat object whose keys fall in the named "
                       "sections below (core/results/sample.py). Field descriptions say which clock and event each "
                       "timing is.",
        "schema_version": SCHEMA_VERSION,
        "type": "object",
        "allOf": parts,
        "properties": keys,
        "additionalProperties": False,
        "$defs": defs,
    }
