"""Concurrency sweeps and measurement points: streams really in flight together, aggregate throughput,
slot checks, fixed work checked, and the points an arm runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sse_fakes import split_events

from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm, Prompt, Settings, Workload
from bakeoff.core.engine.client import StreamResult
from bakeoff.core.engine.contract import Capabilities, EngineAdapter
from bakeoff.core.engine.effective import Effective
from bakeoff.core.engine.pieces import Reader
from bakeoff.core.measure.concurrency import (
    Batch,
    effective_slots,
    refused_levels,
    run_batch,
)
from bakeoff.core.measure.definitions import account, request_fields
from bakeoff.core.measure.points import Point, PointRunner, arm_points, is_done, samples_expected
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.plan import check_levels_before_launch

SSE = (Path(__file__).parents[2] / "fixtures" / "llamacpp" / "chat_stream_sse.txt").read_bytes()
PROMPTS = [Prompt(name="a", messages=[{"role": "user", "content": "A?"}]),
           Prompt(name="b", messages=[{"role": "user", "content": "B?"}])]


class InFlight:
    """A fake engine that holds each stream until ``n`` are open at once (or gives up after 5 s)."""

    def __init__(self, n: int) -> None:
        self.n, self.open, self.most = n, 0, 0
        self.lock = threading.Lock()
        self.all_in = threading.Event()
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.open += 1
            self.most = max(self.most, self.open)
            self.bodies.append(request.content)
            if self.open >= self.n:
                self.all_in.set()
        self.all_in.wait(5)
        with self.lock:
            self.open -= 1
        return httpx.Response(200, content=iter(split_events(SSE)), headers={"content-type": "text/event-stream"})


def test_batch_streams_are_in_flight_together_and_aggregate_counts_all_tokens() -> None:
    engine = InFlight(4)
    http = httpx.Client(transport=httpx.MockTransport(engine), base_url="http://engine")
    batch = run_batch(http, [{"messages": [], "i": i} for i in range(4)], timeout_s=10)
    assert engine.most == 4
    assert all(r.error is None for r in batch.results)
    assert batch.tokens == 4 * 15  # usage.completion_tokens of the capture, per stream
    assert batch.wall_s > 0 and batch.aggregate_tps == pytest.approx(60 / batch.wall_s)
    assert len({b for b in engine.bodies}) == 4


def test_aggregate_is_tokens_over_wall_including_prefill() -> None:
    def res(send: int, done: int, n: int) -> StreamResult:
        return StreamResult(t_send_ns=send, t_done_ns=done, usage={"completion_tokens": n})

    batch = Batch("b", [res(0, 2_000_000_000, 100), res(0, 4_000_000_000, 100)], wall_s=4.0)
    assert batch.aggregate_tps == 50.0


def test_slots_come_from_the_engine_first() -> None:
    arm = Arm(name="a", engine="x", model="m", settings=Settings(parallel=8))
    assert effective_slots(Effective(slots=2), arm) == 2
    assert effective_slots(Effective(slots=256), arm) == 256
    assert effective_slots(Effective(), arm) == 8
    assert effective_slots(Effective(), Arm(name="b", engine="x", model="m")) is None
    assert refused_levels([1, 2, 4], 2) == {4: "concurrency 4 > the engine's 2 slot(s); raise settings.parallel"}
    assert refused_levels([64], None) == {}


def test_levels_above_settings_parallel_are_refused_before_launch() -> None:
    cfg = parse_bakeoff("arms: [{name: a, engine: x, model: m, settings: {parallel: 2}}]\n"
                        "workload: {concurrency: [1, 4]}\n")
    with pytest.raises(ConfigError, match=r"workload.concurrency: arm 'a' asks for 4 streams but settings.parallel"):
        check_levels_before_launch(cfg)
    with pytest.raises(ConfigError, match=r"workload\.concurrency"):
        parse_bakeoff("arms: [{name: a, engine: x, model: m}]\nworkload: {concurrency: []}\n")


def test_points_and_resume_keys() -> None:
    w = Workload(reps=2, depths=[512, 2048], concurrency=[1, 4], modes=["greedy"])
    points = arm_points(w, PROMPTS, ["greedy"])
    assert len(points) == 2 * 2 * 2 * 2
    assert points[0] == Point(PROMPTS[0], "greedy", 0, 512, 1) and points[-1].depth == 2048
    assert samples_expected(w, 2, 1) == 2 * (1 + 4) * 2 * 1 * 2
    plain = Point(PROMPTS[0], "greedy", 1)
    assert is_done({("arm", "a", "greedy", 1, 0)}, "arm", plain, 0)
    assert not is_done({("arm", "a", "greedy", 0, 0)}, "arm", points[0], 0)
    assert is_done({("arm", "a", "greedy", 0, 0, 512, 1)}, "arm", points[0], 0)
    assert samples_expected(Workload(reps=3), 2, 1) == 6


def test_fixed_work_and_thinking_the_engines_way(fake_adapter: Callable[..., EngineAdapter]) -> None:
    """Core sets fixed length (tracking the request's own max_tokens) and thinking, as each engine declares."""
    arm = Arm(name="a", engine="x", model="m")

    def fields(workload: Workload, max_tokens: int | None = 64, **caps: Any) -> dict[str, Any]:
        adapter = fake_adapter(capabilities=Capabilities(**caps))
        return request_fields(arm, adapter, workload, max_tokens)

    assert fields(Workload(), fixed_length_field="min_tokens") == {"min_tokens": 64}
    assert fields(Workload(), 32, fixed_length_field="min_tokens") == {"min_tokens": 32}  # the warm-up's own
    assert fields(Workload(), fixed_length_field="ignore_eos") == {"ignore_eos": True}
    assert fields(Workload(fixed_length=False), fixed_length_field="ignore_eos") == {}
    assert fields(Workload(), None, fixed_length_field="ignore_eos") == {}  # gates answer freely
    assert fields(Workload(thinking=True), thinking_field="chat_template_kwargs") == {
        "chat_template_kwargs": {"enable_thinking": True}}
    assert fields(Workload()) == {}  # a server that would refuse unknown fields gets none


class WordCounter(Reader):
    def count_prompt_tokens(self, http: httpx.Client, messages: list[dict[str, str]],
                            template_kwargs: dict[str, Any] | None = None) -> int:
        return 10 + sum(len(m["content"].split()) for m in messages)


@pytest.fixture
def counting(fake_adapter: Callable[..., EngineAdapter]) -> EngineAdapter:
    """An engine that counts a prompt's tokens by its words (what depth padding asks) and takes min_tokens."""
    return fake_adapter(capabilities=Capabilities(fixed_length_field="min_tokens", token_counts="one_per_event"),
                        reader=WordCounter())


def _runner(adapter: EngineAdapter, workload: Workload, eff: Effective | None = None,
            warnings: list[str] | None = None) -> PointRunner:
    http = httpx.Client(transport=httpx.MockTransport(InFlight(1)), base_url="http://engine")
    arm = Arm(name="arm", engine="fake", model="m")
    return PointRunner(adapter, arm, workload, http, eff or Effective(),
                       (warnings.append if warnings is not None else lambda m: None))


def test_runner_refuses_what_the_engine_cannot_hold_and_warns_once(counting: EngineAdapter) -> None:
    warnings: list[str] = []
    w = Workload(depths=[100, 4000], concurrency=[1, 4], max_tokens=64)
    runner = _runner(counting, w, Effective(context_tokens=2048, slots=2), warnings)
    assert set(runner.refused) == {"depth 4000", "4 streams"}
    kept = runner.accept(arm_points(w, PROMPTS[:1], ["greedy"]))
    assert {(p.depth, p.concurrency) for p in kept} == {(100, 1)}
    assert len(warnings) == 2 and any("depth 4000 + max_tokens 64 > effective context 2048" in m for m in warnings)


def test_runner_pads_to_depth_and_flags_what_did_not_happen(counting: EngineAdapter) -> None:
    runner = _runner(counting, Workload(depths=[300], max_tokens=64))
    body: dict[str, Any] = {"max_tokens": 64, "messages": PROMPTS[0].messages}
    point = Point(PROMPTS[0], "greedy", 0, 300)
    info = runner.prepare(body, point)
    assert info is not None and counting.reader.count_prompt_tokens(runner.http, body["messages"]) == 300
    result = StreamResult(t_send_ns=0, t_done_ns=1, usage={"completion_tokens": 40, "prompt_tokens": 299})
    stream = account(result, "one_per_event")
    sample = Sample(arm="arm", engine="fake", prompt="a", mode="greedy", rep=0,
                    completion_tokens=stream.completion_tokens, prompt_tokens=stream.prompt_tokens)
    runner.finish(sample, point, body, result, info)
    assert (sample.depth, sample.max_tokens, sample.concurrency) == (300, 64, None)
    assert "depth-mismatch: usage.prompt_tokens 299, target 300" in sample.flags
    assert "fixed-length-missed: 40 of 64 tokens" in sample.flags


