"""Depth sweeps: exact token depths measured by the engine's tokenizer, salting, needle, refusals, table."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bakeoff.core.common.errors import CapabilityNotSupported, ConfigError, MeasurementError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm, Prompt, Settings
from bakeoff.core.engine.contract import EngineAdapter
from bakeoff.core.engine.effective import Effective
from bakeoff.core.measure.depth import (
    DepthBuilder,
    effective_context,
    filler_words,
    needle_found,
    refused_depths,
)
from bakeoff.core.run.plan import check_depths_before_launch
from bakeoff.engines.llamacpp import LlamaCppAdapter

FIXTURES = Path(__file__).parents[2] / "fixtures" / "llamacpp"
PROMPT = Prompt(name="q", messages=[{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Write a haiku about tea."}])


def toy_count(messages: list[dict[str, str]]) -> int:
    """A tokenizer with uneven pieces: long words cost 2, a trailing '.' costs 1, plus template overhead."""
    total = 3
    for m in messages:
        total += 4
        for word in m["content"].split():
            total += 2 if len(word.rstrip(".:")) > 6 else 1
            total += word.count(".") + word.count(":")
    return total


@pytest.mark.parametrize("depth", [64, 100, 257, 1000, 4096])
def test_builder_hits_the_exact_depth(depth: int) -> None:
    builder = DepthBuilder(toy_count)
    messages, info = builder.messages(PROMPT, depth, salt="abc123")
    assert toy_count(messages) == depth == info.counted
    assert messages[0] == PROMPT.messages[0]  # only the last user message is padded
    assert messages[1]["content"].startswith("Notes abc123:")  # the salt leads, so no prefix is shared
    assert messages[1]["content"].endswith("Write a haiku about tea.")


def test_second_request_reuses_the_fit_and_salts_differ() -> None:
    calls: list[int] = []

    def counting(messages: list[dict[str, str]]) -> int:
        calls.append(1)
        return toy_count(messages)

    builder = DepthBuilder(counting)
    first, info1 = builder.messages(PROMPT, 2000, salt="s1")
    n_first = len(calls)
    second, _info2 = builder.messages(PROMPT, 2000, salt="s2")
    assert toy_count(second) == 2000
    assert first[1]["content"] != second[1]["content"]
    assert len(calls) - n_first <= n_first  # the previous fit is the starting guess
    assert info1.tokenizer_calls == n_first


def test_prompt_longer_than_depth_is_refused() -> None:
    with pytest.raises(MeasurementError, match="more than depth 10"):
        DepthBuilder(toy_count).messages(PROMPT, 10, salt="x")


def test_count_that_cannot_be_hit_gives_up() -> None:
    def even_only(messages: list[dict[str, str]]) -> int:
        return 2 * toy_count(messages)  # every piece costs 2: an odd depth is impossible

    with pytest.raises(MeasurementError, match="exactly 1001"):
        DepthBuilder(even_only).messages(PROMPT, 1001, salt="x")


def test_needle_sits_mid_filler_and_is_checked_in_the_answer() -> None:
    messages, info = DepthBuilder(toy_count, needle=True).messages(PROMPT, 600, salt="n")
    content = messages[1]["content"]
    assert info.needle and re.fullmatch(r"\d{6}", info.needle)
    pos = content.index(f"The secret code is {info.needle}.")
    assert 0.3 < pos / len(content) < 0.7
    assert "secret code from the notes" in content
    assert toy_count(messages) == 600
    assert needle_found(info, f"The code is {info.needle}.") is True
    assert needle_found(info, "I do not know.") is False
    assert needle_found(None, "anything") is None


def test_filler_is_deterministic_per_salt() -> None:
    assert filler_words("a", 50) == filler_words("a", 50)
    assert filler_words("a", 50) != filler_words("b", 50)
    assert len(filler_words("a", 1234)) == 1234


def test_context_refusals() -> None:
    arm = Arm(name="a", engine="x", model="m", settings=Settings(ctx=4096))
    assert effective_context(Effective(context_tokens=2048), arm) == 2048
    assert effective_context(Effective(context_tokens=8192), arm) == 8192
    assert effective_context(Effective(), arm) == 4096
    assert refused_depths([512, 2048, 4000], 64, 2048) == {
        2048: "depth 2048 + max_tokens 64 > effective context 2048",
        4000: "depth 4000 + max_tokens 64 > effective context 2048"}
    assert refused_depths([10**6], 64, None) == {}


def test_before_launch_refusals_name_the_key(fake_adapter: Callable[..., EngineAdapter]) -> None:
    cfg = parse_bakeoff("arms: [{name: a, engine: llamacpp, model: m, settings: {ctx: 2048}}]\n"
                        "workload: {depths: [512, 2048], max_tokens: 64}\n")
    with pytest.raises(ConfigError, match=r"workload.depths: arm 'a': depth 2048 \+ max_tokens 64 > effective"):
        check_depths_before_launch(cfg, {"a": LlamaCppAdapter()})
    with pytest.raises(CapabilityNotSupported, match="notok cannot count prompt tokens"):
        check_depths_before_launch(cfg, {"a": fake_adapter("notok")})  # a reader with no tokenizer
    with pytest.raises(ConfigError, match=r"workload\.depths"):
        parse_bakeoff("arms: [{name: a, engine: x, model: m}]\nworkload: {depths: [0]}\n")


def _llama(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://engine")


def test_llamacpp_counts_with_its_chat_endpoint() -> None:
    seen: list[tuple[str, dict]] = []  # type: ignore[type-arg]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={"object": "response.input_tokens", "input_tokens": 31})

    n = LlamaCppAdapter().reader.count_prompt_tokens(_llama(handler), [{"role": "user", "content": "Hi"}],
                                              {"enable_thinking": False})
    assert n == 31
    assert seen == [("/v1/chat/completions/input_tokens",
                     {"messages": [{"role": "user", "content": "Hi"}],
                      "chat_template_kwargs": {"enable_thinking": False}})]


def test_llamacpp_falls_back_to_apply_template_then_tokenize_with_specials() -> None:
    seen: list[tuple[str, dict]] = []  # type: ignore[type-arg]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        if request.url.path == "/apply-template":
            return httpx.Response(200, content=(FIXTURES / "apply-template.json").read_bytes())
        if request.url.path == "/tokenize":
            return httpx.Response(200, content=(FIXTURES / "tokenize.json").read_bytes())
        return httpx.Response(404, json={"error": {"message": "File Not Found"}})

    n = LlamaCppAdapter().reader.count_prompt_tokens(_llama(handler), [{"role": "user", "content": "Hi there"}])
    assert n == 8  # the capture's token list
    assert [p for p, _ in seen] == ["/v1/chat/completions/input_tokens", "/apply-template", "/tokenize"]
    tokenize = seen[2][1]
    assert tokenize["add_special"] is True and tokenize["parse_special"] is True
    assert tokenize["content"].startswith("<|im_start|>system\nYou are helpful.")


def test_llamacpp_tokenizer_failure_is_a_measurement_error() -> None:
    with pytest.raises(MeasurementError, match="could not count prompt tokens"):
        LlamaCppAdapter().reader.count_prompt_tokens(_llama(lambda r: httpx.Response(500, text="boom")), [])
