"""The second witness on by default (issue 40, item 5): after each request, off the clock, bakeoff counts the
delivered text with llama-server's own tokenizer (``/tokenize``) against ``usage.completion_tokens``.

One llama-server (SmolLM2, started by the test, attached to by both arms): ``direct`` talks to it; ``short`` talks
to it through a loopback proxy that withholds the last 5 content events of every stream and relays the rest,
usage and timings included, so the engine's counters still say the whole answer was delivered. With the default
settings every ``short`` sample is flagged, no ``direct`` one is.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from relay import relay

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.measure.invariants import TOKENIZE_SOURCE
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run.plan import plan_run
from bakeoff.core.run.protocol import run_plan

pytestmark = pytest.mark.integration

WITHHELD = 5


def _has_content(line: str) -> bool:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return False
    choices = json.loads(line[6:]).get("choices") or []
    return any((c.get("delta") or {}).get("content") for c in choices)


def _withhold_last(lines: Iterable[str]) -> Iterator[str]:
    """Every event as it comes, except the last WITHHELD that carry text."""
    held: deque[str] = deque()
    for line in lines:
        if _has_content(line):
            held.append(line)
            if len(held) <= WITHHELD:
                continue
            line = held.popleft()
        yield line


@pytest.fixture
def withholding_proxy(running_llama_server: str) -> Iterator[str]:
    with relay(running_llama_server, on_events=_withhold_last) as url:
        yield url


def test_a_stream_short_of_its_last_tokens_is_flagged_on_every_sample_by_default(
        running_llama_server: str, withholding_proxy: str, tmp_path: Path) -> None:
    cfg = parse_bakeoff(f"""arms:
  - {{name: direct, engine: llamacpp, url: '{running_llama_server}'}}
  - {{name: short, engine: llamacpp, url: '{withholding_proxy}'}}
workload: {{prompts: [code_python, prose], max_tokens: 64, reps: 2, passes: 1, warmup: 0, gates: []}}
""")
    run = RunDir(tmp_path / "run")
    run_plan(plan_run(cfg), run)
    samples = read_samples(run.path)
    direct = [s for s in samples if s.arm == "direct"]
    short = [s for s in samples if s.arm == "short"]
    assert len(direct) == len(short) == 4 and all(s.status == "ok" for s in samples)
    for s in direct:  # the text witness ran and agreed within its slack
        assert s.witness_source == TOKENIZE_SOURCE and s.witness_tokens is not None, s
        assert not any(f.startswith("text-witness-mismatch") for f in s.flags), s.flags
    for s in short:  # usage still says 64 (or the natural stop's count); the text is 5 tokens short
        assert s.completion_tokens == s.server_completion_tokens and s.witness_source == TOKENIZE_SOURCE, s
        [flag] = [f for f in s.flags if f.startswith("text-witness-mismatch")]
        assert f"usage says {s.completion_tokens} completion tokens, the delivered text is" in flag
        assert s.witness_tokens is not None and s.completion_tokens is not None, s
        assert s.completion_tokens - s.witness_tokens >= WITHHELD - 1, s
