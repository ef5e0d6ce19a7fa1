"""Every sample flag, declared once: its name, whether it keeps a sample out of the statistics, what it means.

A flag is stored in ``samples.jsonl`` as a string, ``name`` or ``name: detail`` (the detail is free text quoting
the numbers that disagree). Writers (core/measure, core/engine, core/run, the engine plugins) build that string
with :meth:`Flag.line`; readers (core/analysis, core/reports) ask :func:`has_flag` or :func:`flag_name` and never
parse the text themselves. This module sits in ``results/``, below every writer and every reader, so both sides
name the same constant.

``docs/flags.md`` is generated from :data:`FLAGS`: ``python -m bakeoff.core.results.flags > docs/flags.md``
(a unit test fails when the committed file and the table differ, and another when a writer writes a flag that is
not in the table).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FLAGS", "FLAG_GLOSSARY", "EXCLUDING", "MACHINE", "Flag", "UnknownFlagError", "first_flag", "flag_detail",
           "flag_name", "glossary", "has_flag", "sample_flag"]


# A flag written or asked for that the table does not declare: a programming error, never a user's.
UnknownFlagError = ValueError


@dataclass(frozen=True)
class Flag:
    """One flag a sample can carry.

    :param name: the text before the first colon, as stored.
    :param excludes: the sample enters no statistic while it carries this flag (its delivery or counts cannot be
        trusted); otherwise the sample stays in and the flag is a caveat.
    :param meaning: what the flag says, for the glossary.
    :param detail: what follows ``name:`` in the stored line ("" when the flag has no detail).
    :param machine: the machine, not the engine, slowed the request (the launch-state test leaves such launches
        out, an undecided gate names them, ``report --drop-foreign-load`` drops foreign-load).
    :param writer: who writes it, for the glossary.
    """

    name: str
    excludes: bool
    meaning: str
    detail: str = ""
    machine: bool = False
    writer: str = "core"

    def line(self, detail: str | None = None) -> str:
        """The stored string: ``name``, or ``name: detail``."""
        return f"{self.name}: {detail}" if detail else self.name

    def on(self, flags: Iterable[str]) -> bool:
        """Whether a sample's flags carry this flag."""
        return any(flag_name(f) == self.name for f in flags)


_TABLE: list[Flag] = []
# where a report sends a reader who meets a flag (the warning line of the verdict block, the report legend)
FLAG_GLOSSARY = "meanings: docs/flags.md"


def _declare(name: str, excludes: bool, meaning: str, detail: str = "", *, machine: bool = False,
             writer: str = "core") -> Flag:
    if any(f.name == name for f in _TABLE):
        raise UnknownFlagError(f"flag {name!r} declared twice")
    out = Flag(name, excludes, meaning, detail, machine, writer)
    _TABLE.append(out)
    return out


# ---- delivery and timing (core/measure/definitions.py, core/engine/client.py) ---------------------------------
BURST_DELIVERY = _declare(
    "burst-delivery", True, "Most token events after the first arrived in one network read: the decode window "
    "measures the network, not the engine.", "how many events arrived together, and the window's share")
FOREIGN_LOAD = _declare(
    "foreign-load", False, "Other processes used more CPU than the limit during the request. The sample stays in; "
    "`bakeoff report --drop-foreign-load` leaves such samples out.", "cores used by others, and the limit",
    machine=True)
HARNESS_LAG = _declare(
    "harness-lag", False, "bakeoff's own reader was away from the socket for more than 1 % of the decode window, "
    "so the rate may be low by as much.", "the longest absence in ms and its share of the window", machine=True)
GPU_THROTTLE = _declare(
    "gpu-throttle", False, "The GPU slowed itself during the request (power or thermal throttle reasons, by NVML).",
    "the throttle reasons", machine=True, writer="core (engine/hardware.py)")
NO_RATE = _declare(
    "no-rate", False, "No decode rate could be computed; the sample enters no rate statistic for that reason "
    "alone (it has no rate), not because of the flag.", "why (e.g. no output tokens, one token event)")
NO_OUTPUT_TOKENS = _declare("no-output-tokens", False, "The stream carried no output tokens.")
N_FIRST_ESTIMATED = _declare(
    "n_first-estimated", False, "The tokens before the decode window were estimated from the first event's share "
    "of the text (the engine sends no per-chunk counts).")
CHUNK_COUNTS_MISSING = _declare(
    "chunk-counts-missing", False, "The engine promised per-chunk token counts but some text events carry none.",
    "how many text events lack a count")
TOKEN_EVENTS_MISMATCH = _declare(
    "token-events-mismatch", False, "The per-event token counts do not add up to usage.completion_tokens.",
    "the events' sum and usage")
USAGE_MISSING = _declare("usage-missing", False, "The stream ended without a usage block (no true token count).")
TIMEOUT = _declare("timeout", False, "The engine stalled: no data (or no complete event) within the timeout; the "
                   "request is an error and the protocol stops the engine.",
                   writer="core (engine/client.py)")
DEADLINE_EXCEEDED = _declare("deadline-exceeded", False, "Still streaming when request_timeout_s ran out (a slow "
                             "request, not a stalled engine); the request is an error.",
                             writer="core (engine/client.py)")
NO_EVENTS = _declare("no-events", False, "The stream closed without a single SSE data event.",
                     writer="core (engine/client.py)")
MALFORMED_SSE = _declare("malformed-sse", False, "A line of the stream was not valid server-sent events.",
                         writer="core (engine/client.py)")
MALFORMED_PAYLOAD = _declare("malformed-payload", False, "An SSE event's data was not the JSON chunk expected.",
                             writer="core (engine/client.py)")
MULTIPLE_CHOICES = _declare("multiple-choices", False, "A chunk carried more than one choice (n > 1 answered).",
                            writer="core (engine/client.py)")
USAGE_CONFLICT = _declare("usage-conflict", False, "A usage block contradicts what the stream delivered; the "
                          "request is an error.", writer="core (engine/client.py)")
USAGE_IMPOSSIBLE = _declare("usage-impossible", False, "usage claims counts the answer cannot have; the "
                            "request is an error.", writer="core (engine/client.py)")

# ---- counts cross-checked (core/measure/definitions.py, core/measure/invariants.py) ----------------------------
COUNT_WITNESS_MISMATCH = _declare(
    "count-witness-mismatch", True, "usage.completion_tokens disagrees with the tokens the stream named one by one "
    "(token ids or logprobs): the count the rate divides by cannot be trusted.", "usage's count and the witness's")
TEXT_WITNESS_MISMATCH = _declare(
    "text-witness-mismatch", False, "usage disagrees, beyond the tokenizer's slack, with the delivered text "
    "re-tokenized. Said, never excluding: a sampled sequence need not be the tokenizer's own split.",
    "usage's count and the text's")
COUNTER_INVARIANT = _declare(
    "counter-invariant", True, "The counts break an invariant no engine can (accepted > drafted, accepted > "
    "completion - 1, reasoning > completion).", "the invariant broken, both sides quoted")
SERVER_COUNT_MISMATCH = _declare(
    "server-count-mismatch", False, "The engine's own completion count differs from usage.", "server and usage")
SETTINGS_MISMATCH = _declare(
    "settings-mismatch", False, "The settings read back from the engine differ from those asked for.")

# ---- workload points (core/measure/points.py, core/measure/structured.py, core/analysis/fairness.py) -----------
CACHE_MISS = _declare(
    "cache-miss", False, "A session turn re-prefilled a whole block or more of the previous turn's prompt.",
    "cached and prompt tokens, the previous prompt, tokens re-prefilled")
CACHE_IMPOSSIBLE = _declare(
    "cache-impossible", False, "A turn claims its whole prompt cached, which no engine can have; the sample stays "
    "in the decode statistics but no prefill rate or cache-hit ratio is read from it.", "the claimed count")
CACHE_UNREPORTED = _declare(
    "cache-unreported", False, "The engine reports no cached prompt tokens for a session turn.", "a fixed sentence")
DEPTH_MISMATCH = _declare(
    "depth-mismatch", False, "A depth point's prompt did not come out at its target token count.",
    "usage.prompt_tokens and the target")
NEEDLE_MISSED = _declare("needle-missed", False, "A depth point's answer did not contain the hidden code.")
FIXED_LENGTH_MISSED = _declare(
    "fixed-length-missed", False, "A fixed-length request ended before max_tokens.", "tokens of max_tokens")
STALL = _declare(
    "stall", False, "A structured answer paused mid-answer beyond the workload's stall threshold.",
    "the pause in seconds and its multiple of the median gap")
SPECULATION_DISENGAGED = _declare(
    "speculation-disengaged", False, "Under a structured constraint the engine drafted nothing, or accepted far "
    "less than on free text just before.", "drafted or acceptance against the free-text figure",
    writer="core (run/arm.py)")
TRUNCATED_STREAM = _declare("truncated-stream", False, "The stream ended with no finish_reason.",
                            "a fixed sentence", writer="core (run/arm.py)")
FINISH_REASON = _declare(
    "finish-reason", False, "The answer ended otherwise than expected (length under fixed length, stop otherwise).",
    "the finish_reason and the expected one", writer="core (run/arm.py)")
EMPTY_OUTPUT = _declare("empty-output", False, "The answer's text was empty.", writer="core (run/arm.py)")

# ---- what the engine reports (core/engine/readback.py, core/analysis/acceptance.py, engine adapters) -----------
BAD_ENGINE_VALUE = _declare(
    "bad-engine-value", False, "An engine figure had the wrong type or an impossible value; it was not used.",
    "where, and the value shown", writer="core, engines")
ACCEPTANCE_PER_POSITION_MISMATCH = _declare(
    "acceptance-per-position-mismatch", False, "The engine's per-position accepted counts do not sum to its "
    "accepted total.", "the sum and the total")
ACCEPTANCE_POSITIONS_NOT_PREFIX = _declare(
    "acceptance-positions-not-prefix", False, "A later draft position accepted more than an earlier one, which a "
    "draft accepted as a prefix cannot.", "the per-position counts")
ACCEPTANCE_HISTOGRAM_MISMATCH = _declare(
    "acceptance-histogram-mismatch", False, "The engine's acceptance histogram disagrees with its drafts or its "
    "per-position counts.", "which side disagrees, both quoted")
ACCEPTANCE_MISMATCH = _declare(
    "acceptance-mismatch", False, "The engine's two sources of draft counts (/metrics and per-request timings) "
    "disagree.", "both counts", writer="llamacpp, vllm")
ACCEPTANCE_LOG_MISMATCH = _declare(
    "acceptance-log-mismatch", False, "The engine log's draft acceptance line disagrees with the request's counts.",
    "log and request counts", writer="llamacpp, exllama, ikllama")
ACCEPTANCE_CROSSCHECK_MISSING = _declare(
    "acceptance-crosscheck-missing", False, "The draft counts could not be confirmed by a second source (no "
    "/metrics snapshot or log line of the request's own). The counts are used as the engine gave them.",
    "which source was missing", writer="llamacpp, exllama, ikllama")
ACCEPTANCE_ESTIMATED = _declare(
    "acceptance-estimated", False, "Acceptance was estimated from decode log lines, not exact per-request counts.",
    "how many log lines", writer="sglang")
ACCEPTANCE_UNAVAILABLE = _declare(
    "acceptance-unavailable", False, "The engine gave no per-request acceptance numbers.", "why",
    writer="sglang")
METRICS_UNAVAILABLE = _declare(
    "metrics-unavailable", False, "/metrics could not be read, or lacks the speculative-decoding counters.",
    "what was missing", writer="llamacpp, vllm")
METRICS_LOG_MISSING = _declare(
    "metrics-log-missing", False, "No Metrics log line for the request.", writer="exllama")
LOG_MISSING = _declare(
    "log-missing", False, "No draft acceptance line for the request in the engine log.", "what was missing",
    writer="llamacpp")
LOG_COUNT_MISMATCH = _declare(
    "log-count-mismatch", False, "The engine log's generated-token count differs from usage.", "log and usage",
    writer="exllama")
CACHE_COUNT_MISMATCH = _declare(
    "cache-count-mismatch", False, "The cached-token count in usage differs from the engine's own.", "both counts",
    writer="exllama, vllm")
PROMPT_CACHE_HIT = _declare(
    "prompt-cache-hit", False, "The engine served part of the prompt from its cache.", "cached tokens",
    writer="exllama")
SERVER_USAGE_MISSING = _declare(
    "server-usage-missing", False, "The engine's response carried no usage of its own.", writer="exllama")
SERVER_TIMINGS_MISSING = _declare(
    "server-timings-missing", False, "The engine's response carried no timings block.", writer="llamacpp, ikllama")
SERVER_COUNT_MISSING = _declare(
    "server-count-missing", False, "The engine's final event carried no generated-token count.", writer="sim")

FLAGS: dict[str, Flag] = {f.name: f for f in _TABLE}
EXCLUDING: tuple[str, ...] = tuple(f.name for f in _TABLE if f.excludes)
MACHINE: tuple[str, ...] = tuple(f.name for f in _TABLE if f.machine)


def sample_flag(name: str) -> Flag:
    """The declared flag of this name; :class:`UnknownFlagError` for any other."""
    try:
        return FLAGS[name]
    except KeyError:
        raise UnknownFlagError(f"no sample flag named {name!r} in core/results/flags.py") from None


def flag_name(line: str) -> str:
    """The flag's name in a stored line (the text before the first colon)."""
    return line.split(":", 1)[0].strip()


def flag_detail(line: str) -> str | None:
    """What follows ``name:`` in a stored line, or None for a bare flag."""
    _, sep, rest = line.partition(":")
    return rest.strip() or None if sep else None


def has_flag(flags: Iterable[str], name: str | Flag) -> bool:
    """Whether ``flags`` (a sample's) carry the flag ``name``."""
    wanted = name.name if isinstance(name, Flag) else sample_flag(name).name
    return any(flag_name(f) == wanted for f in flags)


def first_flag(flags: Iterable[str], names: Iterable[str]) -> str | None:
    """The name of the first of ``flags`` whose name is among ``names``, or None."""
    among = set(names)
    return next((n for f in flags if (n := flag_name(f)) in among), None)


def glossary() -> str:
    """``docs/flags.md``: the table as Markdown (what ``python -m bakeoff.core.results.flags`` prints)."""
    kept = ", ".join(f"`{n}`" for n in EXCLUDING)
    lines = [
        "# Sample flags",
        "",
        "<!-- generated from core/results/flags.py: python -m bakeoff.core.results.flags > docs/flags.md -->",
        "",
        "Each sample in `samples.jsonl` carries a list of flags, each `name` or `name: detail` (the detail quotes",
        "the numbers that disagree). A flagged sample stays stored. Only the flags marked **out** keep a sample out",
        "of every statistic:",
        "",
        kept + ".",
        "",
        "Every other flag is a caveat and the sample stays in. The machine flags",
        f"({', '.join(f'`{n}`' for n in MACHINE)}) stay in too: the launch-state test leaves their launches out,",
        "and `bakeoff report --drop-foreign-load` drops foreign-load samples. A sample with no decode rate (`no-rate`)",
        "enters no rate statistic because it has no rate, not because of its flag.",
        "",
        "| flag | statistics | meaning | detail | written by |",
        "|---|---|---|---|---|",
    ]
    for f in sorted(_TABLE, key=lambda f: (not f.excludes, not f.machine, f.name)):
        use = "**out**" if f.excludes else "in (machine)" if f.machine else "in"
        lines.append(f"| `{f.name}` | {use} | {f.meaning} | {f.detail or '–'} | {f.writer} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(glossary(), end="")
