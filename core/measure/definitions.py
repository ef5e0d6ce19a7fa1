"""Measurement definitions: what bakeoff sends, and how one response becomes one Sample's numbers.

This is DESIGN.md's "Measurement definitions" in code, in one place (see docs/architecture.md):

- :func:`build_request`: the request every arm sends (same prompt, sampling and length everywhere; the
  engine's own fields come from its adapter);
- :func:`account`: the client-side accounting of one recorded stream (core/engine/client.py records and parses
  it), as a typed :class:`StreamAccount`: token-bearing events, ``n_first`` (the tokens of the read that opens
  the decode window), the decode window, decode and prefill rates, TTFT, and the flags that say a rate cannot
  be read (burst delivery, a client away from the socket, no decode window);
- :func:`make_sample`: that accounting plus the server's own counts and acceptance (rate =
  accepted/drafted, mean accepted length = 1 + accepted/drafts, per-position rates and the histogram of
  accepted drafts per step: core/analysis/acceptance.py) and the foreign-load flag, as a Sample.

Tokens are counted from what the engine reports (usage, or its own per-chunk counts), never from events:
vLLM packs every accepted draft token into one event, so event counts read speculative gains as losses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from ..analysis.acceptance import ACCEPTANCE_FIELDS, acceptance_detail
from ..config.schema import Arm, Prompt, SamplingMode, Workload
from ..engine.client import StreamResult, TokenCounts
from ..engine.contract import EngineAdapter
from ..engine.pieces import ServerStats
from ..host.hostinfo import FOREIGN_LOAD_FLOOR
from ..results.flags import (
    BURST_DELIVERY,
    CACHE_COUNT_MISMATCH,
    CHUNK_COUNTS_MISSING,
    FOREIGN_LOAD,
    HARNESS_LAG,
    N_FIRST_ESTIMATED,
    NO_OUTPUT_TOKENS,
    NO_RATE,
    SERVER_COUNT_MISMATCH,
    SETTINGS_MISMATCH,
    TOKEN_EVENTS_MISMATCH,
    USAGE_MISSING,
    has_flag,
)
from ..results.sample import Sample
from .invariants import counter_flags, reasoning_tokens, witness_flag

__all__ = ["build_request", "request_fields", "account", "make_sample", "prefill_rate", "StreamAccount"]

BURST_WINDOW_SHARE = 0.1  # burst-delivery: a decode window under this share of send-to-last-token
HARNESS_LAG_SHARE = 0.01  # a reader away for 1 % of the decode window could have moved the rate by as much
HARNESS_LAG_FLOOR_S = 50e-6  # below this a pause is lost in the network stack's own jitter


def _burst_share(per_event: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(token events after the first in the one read that carried most of them, all token events after the first).

    Events, not tokens: an engine may pack many tokens into one event (vLLM), and a speculative engine writes
    an accepted draft's events back to back, so a few events per read are normal; a buffering or
    compressing proxy hands over most of the stream's events in one read.
    """
    by_read: dict[int, int] = {}
    for _, read, _ in per_event[1:]:
        by_read[read] = by_read.get(read, 0) + 1
    return max(by_read.values(), default=0), len(per_event) - 1


@dataclass
class StreamAccount:
    """The client-side accounting of one stream: the Sample fields of its stream section (core/results/sample.py
    ``SampleStream``), of what came back (``SampleOutput``) and of the reader's own cost (``SampleHarness``), and
    the flags the accounting raised. None: the stream gave no such figure (no usage, no decode window, ...)."""

    flags: list[str] = field(default_factory=list)
    events: int = 0
    reads: int = 0
    client_cpu_s: float | None = None
    client_lag_s: float | None = None
    arrival_clock: Literal["kernel", "user"] | None = None
    usage_present: bool = False
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    output_sha256: str | None = None
    output_chars: int | None = None
    e2e_s: float | None = None
    token_events: int = 0
    n_first: int | None = None
    n_first_source: Literal["usage", "one-per-event", "estimated"] | None = None
    max_tokens_per_event: int | None = None
    mean_tokens_per_event: float | None = None
    ttft_s: float | None = None
    decode_s: float | None = None
    decode_tps: float | None = None
    event_count_decode_tps: float | None = None

    def apply(self, sample: Sample) -> None:
        """Write this account onto ``sample``: every field above, the flags replacing the sample's."""
        sample.flags = list(self.flags)
        sample.events, sample.reads, sample.token_events = self.events, self.reads, self.token_events
        sample.client_cpu_s, sample.client_lag_s = self.client_cpu_s, self.client_lag_s
        sample.arrival_clock = self.arrival_clock
        sample.usage_present, sample.completion_tokens = self.usage_present, self.completion_tokens
        sample.prompt_tokens, sample.cached_tokens = self.prompt_tokens, self.cached_tokens
        sample.finish_reason = self.finish_reason
        sample.output_sha256, sample.output_chars = self.output_sha256, self.output_chars
        sample.n_first, sample.n_first_source = self.n_first, self.n_first_source
        sample.max_tokens_per_event = self.max_tokens_per_event
        sample.mean_tokens_per_event = self.mean_tokens_per_event
        sample.ttft_s, sample.decode_s, sample.e2e_s = self.ttft_s, self.decode_s, self.e2e_s
        sample.decode_tps = self.decode_tps
        sample.event_count_decode_tps = self.event_count_decode_tps


def account(result: StreamResult, token_counts: TokenCounts) -> StreamAccount:
    """The accounting of one stream (its Sample fields: :meth:`StreamAccount.apply`).

    An event is token-bearing when the cumulative count it reports rose (engines declaring per-chunk
    counts, when the stream really carries them) or, otherwise, when it carried output text. N always
    comes from the final usage. A sample without a decode rate carries a ``no-rate: why`` flag.
    """
    out = StreamAccount(flags=list(result.flags), events=len(result.events), reads=result.reads,
                        client_cpu_s=result.client_cpu_s, client_lag_s=result.client_lag_s,
                        arrival_clock=result.arrival_clock)
    usage = result.usage or {}
    n = usage.get("completion_tokens")
    out.usage_present = n is not None
    out.completion_tokens = n
    out.prompt_tokens = usage.get("prompt_tokens")
    out.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    out.finish_reason = result.finish_reason
    out.output_sha256 = hashlib.sha256(result.text.encode()).hexdigest()
    out.output_chars = len(result.text)
    out.e2e_s = (result.t_done_ns - result.t_send_ns) / 1e9 if result.t_done_ns else None

    text_events = [e for e in result.events if e.content]
    per_chunk = token_counts in ("usage_per_chunk", "engine_per_chunk")
    counted = [e for e in result.events if e.count is not None]
    have_counts = per_chunk and bool(counted) and all(e.count is not None for e in text_events)
    if per_chunk and not have_counts and text_events:
        missing = sum(e.count is None for e in text_events)
        out.flags.append(CHUNK_COUNTS_MISSING.line(f"{missing} of {len(text_events)} text events carry no "
                                                      "token count; tokens per event estimated"))
    per_event: list[tuple[int, int, int]] = []  # (t_ns, read, tokens in event)
    if have_counts:
        prev = 0
        for e in counted:
            assert e.count is not None
            if e.count > prev:
                per_event.append((e.t_ns, e.read, e.count - prev))
            prev = max(prev, e.count)
    else:
        per_event = [(e.t_ns, e.read, 1) for e in text_events]
        # A natural stop: usage counts the end-of-generation token, which is streamed with no text on
        # the finish event. Count it there, so the decode window ends where the server's does.
        if (token_counts == "one_per_event" and result.finish_reason == "stop" and n == len(per_event) + 1
                and result.finish_t_ns is not None):
            finish_read = next((e.read for e in result.events if e.t_ns == result.finish_t_ns), -1)
            per_event.append((result.finish_t_ns, finish_read, 1))
    out.token_events = len(per_event)
    if not per_event:
        if result.error is None:
            out.flags += [NO_OUTPUT_TOKENS.line(), NO_RATE.line("no output tokens")]
        return out

    counts = [c for _, _, c in per_event]
    # The decode window opens when the read that carried the first token event arrived: a read is stamped with
    # its newest packet, so every token that came in that read (a late reader gets several events at once) is
    # before the window, not in it. Counting only the first event's tokens over-read such streams by 15-38 %.
    first_read = per_event[0][1]
    in_first_read = [c for _, read, c in per_event if read == first_read]
    source: Literal["usage", "one-per-event", "estimated"]
    if have_counts:
        n_first, source = sum(in_first_read), "usage"
        out.max_tokens_per_event = max(counts)
    elif token_counts == "one_per_event":
        n_first, source = len(in_first_read), "one-per-event"
        out.max_tokens_per_event = 1
    else:
        # No per-chunk count: the first read's share of the output text is the best estimate of its tokens
        # (M5: N / events is biased when one event carries most of the text).
        first_text = sum(len(e.content) for e in text_events if e.read == text_events[0].read)
        share = first_text / max(1, len(result.text))
        n_first, source = max(1, round((n if n and n > 0 else len(per_event)) * share)), "estimated"
        out.flags.append(N_FIRST_ESTIMATED.line())
    out.n_first, out.n_first_source = n_first, source
    if n is not None:
        out.mean_tokens_per_event = n / len(per_event)
        if (token_counts == "one_per_event" or have_counts) and sum(counts) != n and result.error is None:
            out.flags.append(TOKEN_EVENTS_MISMATCH.line(f"events carry {sum(counts)} tokens, usage says {n}"))
    else:
        out.flags.append(USAGE_MISSING.line())

    t_first, t_last = per_event[0][0], per_event[-1][0]
    out.ttft_s = (t_first - result.t_send_ns) / 1e9
    decode_s = (t_last - t_first) / 1e9
    out.decode_s = decode_s
    if decode_s > 0:
        if n is not None:
            out.decode_tps = (n - n_first) / decode_s
        out.event_count_decode_tps = (len(per_event) - 1) / decode_s
    if len(per_event) >= 4:
        # Buffered delivery inflates a rate only by shrinking the decode window; a speculative engine may also
        # write most events in one burst (a long accepted draft), but its window stays as long as generation.
        together, decode_events = _burst_share(per_event)
        if together * 2 > decode_events and decode_s < BURST_WINDOW_SHARE * (t_last - result.t_send_ns) / 1e9:
            out.flags.append(BURST_DELIVERY.line(f"{together} of {decode_events} token events after the first "
                                                    "arrived in one network read (a buffering proxy or server); "
                                                    "no speed is read from it"))
    lag = result.client_lag_s
    if lag is not None and decode_s > 0 and lag > max(HARNESS_LAG_SHARE * decode_s, HARNESS_LAG_FLOOR_S):
        out.flags.append(HARNESS_LAG.line(f"the client was away from the socket for {lag * 1e3:.2f} ms, "
                                             f"{lag / decode_s:.1%} of the decode window (its own work, another "
                                             "thread or the OS)"))
    if out.decode_tps is None and result.error is None:
        why = ("usage missing" if n is None else "one token event, no decode window" if len(per_event) == 1
               else "all token events arrived at once")
        out.flags.append(NO_RATE.line(why))
    return out


def prefill_rate(prompt_tokens: int | None, cached_tokens: int | None, ttft_s: float | None) -> float | None:
    """The client's prefill rate: the prompt tokens the server computed (not read from its cache) over TTFT;
    None without a prompt count, a TTFT, or a prompt left to compute. Read once the cached count is settled
    (usage's, else the server's own)."""
    uncached = (prompt_tokens or 0) - (cached_tokens or 0)
    return uncached / ttft_s if prompt_tokens is not None and uncached > 0 and ttft_s else None


def request_fields(arm: Arm, adapter: EngineAdapter, workload: Workload, max_tokens: int | None) -> dict[str, Any]:
    """The fields every request to this engine carries beyond the OpenAI ones, set here once for timed,
    warm-up, gate and phase requests: thinking (``capabilities.thinking_field``), fixed length
    (``capabilities.fixed_length_field``, tracking the request's own ``max_tokens``: TabbyAPI refuses
    ``min_tokens`` above it), then the adapter's engine-only fields (``EngineAdapter.request_fields``).

    :param max_tokens: the request's max_tokens; None: a request that must not be forced to a length.
    """
    caps = adapter.capabilities
    fields: dict[str, Any] = {}
    if caps.thinking_field == "chat_template_kwargs":
        fields["chat_template_kwargs"] = {"enable_thinking": workload.thinking}
    if workload.fixed_length and max_tokens is not None:
        if caps.fixed_length_field == "ignore_eos":
            fields["ignore_eos"] = True
        elif caps.fixed_length_field == "min_tokens":
            fields["min_tokens"] = max_tokens
    fields.update(adapter.request_fields(arm, workload))
    return fields


def build_request(arm: Arm, adapter: EngineAdapter, workload: Workload, prompt: Prompt, mode: SamplingMode,
                  model_id: str | None, max_tokens: int | None = None) -> dict[str, Any]:
    """The request body every arm sends for one prompt and sampling mode: the same core fields everywhere,
    then thinking, fixed length and the engine's own fields (:func:`request_fields`).

    A structured prompt adds its ``response_format`` or ``tools``/``tool_choice`` and is never forced to a
    length: the grammar ends the answer, and an engine told to ignore the end would run past it.

    :param max_tokens: a shorter limit than the workload's (the untimed warm-up).
    """
    limit = workload.max_tokens if max_tokens is None else max_tokens
    if prompt.structured and max_tokens is None and workload.structured and workload.structured.max_tokens:
        limit = workload.structured.max_tokens  # a JSON document or tool call is as long as it is
    body: dict[str, Any] = {
        "model": model_id or arm.name,
        "messages": prompt.messages,
        "max_tokens": limit,
        "stream": True,
        "stream_options": adapter.reader.stream_options(adapter.capabilities.token_counts),
        "temperature": mode.temperature,
    }
    for key in ("top_p", "top_k", "seed"):
        if getattr(mode, key) is not None:
            body[key] = getattr(mode, key)
    for key in ("response_format", "tools", "tool_choice"):
        if getattr(prompt, key) is not None:
            body[key] = getattr(prompt, key)
    body.update(request_fields(arm, adapter, workload, None if prompt.structured else limit))
    return body


def make_sample(arm: Arm, adapter: EngineAdapter, result: StreamResult, stats: ServerStats, run_id: str,
                prompt: str, mode: str, rep: int, pass_index: int, foreign: float | None, started_at: float,
                foreign_limit: float = FOREIGN_LOAD_FLOOR, *, settings_mismatch: bool = False) -> Sample:
    """One request as a Sample: the client-side accounting of its stream, the server's own counts and
    acceptance, and the flags that say when a number must not be trusted as it stands.

    :param foreign: CPU cores used by other processes during the request (None: not measured).
    :param settings_mismatch: the engine runs with other settings than the arm asked for.
    """
    caps = adapter.capabilities
    stream = account(result, caps.token_counts)
    flags: list[str] = stream.flags + list(stats.flags)
    sample = Sample(run_id=run_id, arm=arm.name, engine=adapter.name, prompt=prompt, mode=mode,
                    rep=rep, pass_index=pass_index, started_at=started_at)
    stream.apply(sample)
    sample.status = "error" if result.error else "ok"
    sample.error = result.error
    sample.server_completion_tokens = stats.completion_tokens
    sample.witness_tokens, sample.witness_source = result.witness_tokens, result.witness_source
    sample.server_decode_tps = stats.decode_tps
    sample.server_prefill_tps = stats.prefill_tps
    sample.server_cached_tokens = stats.cached_tokens
    sample.reasoning_tokens = reasoning_tokens(result.usage)
    if sample.cached_tokens is not None and stats.cached_tokens is not None \
            and sample.cached_tokens != stats.cached_tokens \
            and not has_flag(flags, CACHE_COUNT_MISMATCH):  # the adapter's own says more (vLLM)
        flags.append(CACHE_COUNT_MISMATCH.line(f"usage says {sample.cached_tokens} cached prompt tokens, the "
                                               f"server's own counter {stats.cached_tokens}"))
    if sample.cached_tokens is None and stats.cached_tokens is not None:  # llama.cpp: timings.cache_n
        sample.cached_tokens = stats.cached_tokens
    sample.prefill_tps = prefill_rate(sample.prompt_tokens, sample.cached_tokens, sample.ttft_s)
    if stats.completion_tokens is not None and sample.completion_tokens is not None \
            and stats.completion_tokens != sample.completion_tokens:
        flags.append(SERVER_COUNT_MISMATCH.line(f"server {stats.completion_tokens}, usage {sample.completion_tokens}"))
    if arm.speculative.enabled or stats.drafted:
        detail = acceptance_detail(stats.drafted, stats.accepted, stats.drafts, stats.accepted_per_position,
                                   stats.accepted_histogram, stats.unavailable, stats.derived)
        for name in ACCEPTANCE_FIELDS:
            setattr(sample, name, getattr(detail, name))
        sample.acceptance_unavailable = detail.acceptance_unavailable
        sample.acceptance_derived = detail.acceptance_derived
        sample.acceptance_source = stats.source
        flags += [f for f in detail.flags if f not in flags]
    sample.foreign_cpu_cores = foreign
    if foreign is not None and foreign > foreign_limit:  # judged against the cores the engine left free
        flags.append(FOREIGN_LOAD.line(f"{foreign:.2f} cores used by other processes (limit {foreign_limit:.2f})"))
    if settings_mismatch:
        flags.append(SETTINGS_MISMATCH.line())
    if result.error is None:  # counts that must hold together, from two witnesses each (measure/invariants.py)
        if why := witness_flag(sample.completion_tokens, result.witness_tokens, result.witness_source,
                               result.finish_reason):
            flags.append(why)
        flags += counter_flags(sample.completion_tokens, reasoning_tokens(result.usage), sample.accepted,
                               sample.drafted)
    sample.flags = flags
    return sample
