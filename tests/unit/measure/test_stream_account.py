"""measure/definitions.py: the typed stream account, and every one of its fields reaching the Sample."""

from __future__ import annotations

import dataclasses
import typing

from bakeoff.core.engine.client import StreamResult
from bakeoff.core.measure.definitions import StreamAccount, account
from bakeoff.core.results.flags import NO_RATE
from bakeoff.core.results.sample import Sample, SampleHarness, SampleOutput, SampleStream

_LITERALS = {"arrival_clock": "kernel", "n_first_source": "estimated"}


def _distinct_account() -> StreamAccount:
    """A StreamAccount whose every field holds a value unlike its default and unlike every other field's."""
    hints = typing.get_type_hints(StreamAccount)
    values: dict[str, typing.Any] = {}
    for i, f in enumerate(dataclasses.fields(StreamAccount), start=1):
        kinds = set(typing.get_args(hints[f.name]) or [hints[f.name]]) - {type(None)}
        if f.name in _LITERALS:
            values[f.name] = _LITERALS[f.name]
        elif f.name == "flags":
            values[f.name] = ["one-flag", "another: detail"]
        elif kinds == {bool}:
            values[f.name] = True
        elif kinds == {int}:
            values[f.name] = 100 + i
        elif kinds == {float}:
            values[f.name] = 0.5 + i
        elif kinds == {str}:
            values[f.name] = f"text-{i}"
        else:
            raise AssertionError(f"StreamAccount.{f.name}: no test value for {hints[f.name]}")
    return StreamAccount(**values)


def test_every_field_of_the_account_reaches_the_sample() -> None:
    acc = _distinct_account()
    sample = Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0)
    acc.apply(sample)
    for f in dataclasses.fields(StreamAccount):
        assert getattr(sample, f.name) == getattr(acc, f.name), f.name
    again = Sample.model_validate(sample.model_dump())  # what apply wrote is of the types the Sample declares
    assert again == sample
    sample.flags.append("later")
    assert acc.flags == ["one-flag", "another: detail"]  # the sample holds its own list


def test_the_account_covers_the_stream_and_output_sections_and_only_sample_fields() -> None:
    names = {f.name for f in dataclasses.fields(StreamAccount)} - {"flags"}
    # reasoning_tokens is read from usage by make_sample, beside the server's counts (bakeoff conform's check);
    # prefill_tps there too, once the cached count is settled (usage's, else the server's own)
    stream_and_output = (set(SampleStream.model_fields) | set(SampleOutput.model_fields)) - {"reasoning_tokens",
                                                                                             "prefill_tps"}
    assert stream_and_output <= names
    assert names - stream_and_output <= set(SampleHarness.model_fields)  # the reader's own cost and clock


def test_an_account_of_a_stream_without_tokens_is_typed_and_says_why() -> None:
    result = StreamResult(t_send_ns=0, t_done_ns=2_000_000, usage={"completion_tokens": 0, "prompt_tokens": 7})
    acc = account(result, "one_per_event")
    assert isinstance(acc, StreamAccount)
    assert (acc.completion_tokens, acc.prompt_tokens, acc.token_events, acc.usage_present) == (0, 7, 0, True)
    assert acc.decode_tps is None and acc.ttft_s is None and acc.e2e_s == 0.002
    assert len(acc.flags) == 2 and acc.flags[1].startswith(NO_RATE.name)  # no output tokens, hence no rate


def test_the_prefill_rate_is_read_once_the_cached_count_is_settled() -> None:
    from bakeoff.core.measure.definitions import prefill_rate
    assert prefill_rate(100, 40, 0.5) == 120.0  # 60 computed prompt tokens in half a second
    assert prefill_rate(100, None, 0.5) == 200.0
    assert prefill_rate(100, 100, 0.5) is None  # all from the cache: nothing computed to time
    assert prefill_rate(None, 0, 0.5) is None and prefill_rate(100, 0, None) is None
