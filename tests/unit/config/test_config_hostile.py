"""Bakeoff files that used to crash, hang or be accepted silently (FAULTS D15, D17, D19, D21; issue 12 item 10):
each is a ConfigError naming the file, the line and the cause, before anything runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import MAX_YAML_VALUES, load_bakeoff, parse_bakeoff

ARM = "arms:\n  - {name: a, engine: sim, model: x}\n"


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_bakeoff(text, "b.yaml")
    return str(info.value)


# -- D15: bad bytes, bad URLs ---------------------------------------------------------------------------------
def test_a_latin1_byte_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_bytes(b"name: ok\n" + ARM.encode() + b"workload: {reps: 1}\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"b\.yaml:5: not UTF-8 text \(byte 0xe9\)"):
        load_bakeoff(path)


@pytest.mark.parametrize("url, words", [
    ("http://[::1", "not a valid URL"),
    ("http://127.0.0.1:99999", "not a valid URL"),
    ("http://127.0.0.1:port", "not a valid URL"),
    ("ftp://127.0.0.1:21", "use an http:// or https:// URL, not 'ftp'"),
    ("127.0.0.1:8080", "use an http:// or https:// URL"),
    ("http:///v1", "the URL names no host"),
])
def test_an_unusable_url_is_refused_at_parse_time(url: str, words: str) -> None:
    msg = refused(f"arms:\n  - {{name: a, engine: openai, url: '{url}'}}\n")
    assert "b.yaml:2: arms[0].url" in msg and words in msg


def test_good_urls_pass() -> None:
    for url in ("http://127.0.0.1:8080", "https://gateway.example/v1", "http://[::1]:8000", "http://u:p@h:1/x"):
        assert parse_bakeoff(f"arms:\n  - {{name: a, engine: openai, url: '{url}'}}\n").arms[0].url == url


# -- D21: duplicate keys, empty or repeated lists -------------------------------------------------------------
def test_a_key_given_twice_is_an_error_naming_both_lines() -> None:
    msg = refused(ARM + "workload: {reps: 3}\nworkload: {reps: 1}\n")
    assert "key 'workload' is given twice (lines 3 and 4)" in msg
    msg = refused("arms:\n  - name: a\n    engine: sim\n    model: x\n    name: b\n")
    assert "key 'name' is given twice (lines 2 and 5)" in msg


def test_merge_keys_are_not_duplicates() -> None:
    text = "base: &b {engine: sim, model: x}\narms:\n  - {<<: *b, name: a}\n"
    with pytest.raises(ConfigError, match="base: unknown key"):  # merged fine; only the extra top key is refused
        parse_bakeoff(text)


@pytest.mark.parametrize("workload, words", [
    ("{prompts: []}", "workload.prompts: an empty list runs nothing"),
    ("{prompts: [prose, prose]}", "prompt 'prose' is listed twice"),
    ("{modes: []}", "workload.modes: an empty list runs nothing"),
    ("{modes: [greedy, greedy]}", "mode 'greedy' is listed twice"),
    ("{suite: []}", "an empty suite runs nothing"),
    ("{suite: [{name: p, messages: [{role: user, content: a}]}, {name: p, messages: [{role: user, content: b}]}]}",
     "prompt name 'p' is listed twice"),
    ("{concurrency: [2, 2]}", "level 2 is listed twice"),
])
def test_empty_or_repeated_lists_are_refused(workload: str, words: str) -> None:
    assert words in refused(ARM + f"workload: {workload}\n")


# -- D19: alias bombs -----------------------------------------------------------------------------------------
def test_an_alias_bomb_is_refused_quickly_and_cheaply() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    text = "arms:\n  - name: a\n    engine: sim\n    model: x\n    options:\n" + "".join(
        f"      {line}\n" for line in lines) + "    sweep: {settings.threads: [1, 2]}\n"
    assert len(text) < 1000
    started = time.process_time()
    msg = refused(text)
    assert "expands to" in msg and f"more than the {MAX_YAML_VALUES:,}" in msg
    assert time.process_time() - started < 5  # CPU seconds, not wall clock: the old path needed ~16


def test_a_few_aliases_are_fine() -> None:
    text = "x: &s {engine: sim, model: x}\n"
    config = parse_bakeoff("arms:\n  - &a {name: a, engine: sim, model: x}\n  - {name: b, engine: sim, model: x}\n")
    assert [a.name for a in config.arms] == ["a", "b"] and text


# -- D17: bounds on user-given sizes --------------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("reps", 10 ** 12), ("max_tokens", 2 ** 70), ("passes", 10 ** 9),
                                          ("warmup", 10 ** 9), ("request_timeout_s", 1e300)])
def test_absurd_sizes_are_refused(field: str, value: float) -> None:
    refusal = refused(ARM + f"workload: {{{field}: {value}}}\n")
    assert f"workload.{field}: Input should be less than or equal to" in refusal


def test_n_boot_has_an_upper_bound(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bakeoff.core.cli import app

    (tmp_path / "run.json").write_text("{}")
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--n-boot", "1000000000000"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "--n-boot" in result.output and "less than or equal to 1000000" in result.output


# -- issue 12 item 10: YAML booleans where text is expected ---------------------------------------------------
@pytest.mark.parametrize("text, where, word", [
    ("arms:\n  - {name: off, engine: sim, model: x}\n", "b.yaml:2: arms[0].name", "off"),
    ("arms:\n  - {name: a, engine: sim, model: x, settings: {flash_attn: on}}\n",
     "b.yaml:2: arms[0].settings.flash_attn", "on"),
    ("name: yes\n" + ARM, "b.yaml:1: name", "yes"),
    (ARM + "workload: {prompts: [no]}\n", "b.yaml:3: workload.prompts[0]", "no"),
])
def test_an_unquoted_yaml_boolean_where_text_is_expected_says_to_quote_it(text: str, where: str, word: str) -> None:
    msg = refused(text)
    assert where in msg
    assert f"YAML reads the unquoted {word!r} as the boolean" in msg and f'quote it ("{word}")' in msg


def test_a_quoted_off_is_a_string() -> None:
    parsed = parse_bakeoff("arms:\n  - {name: 'off', engine: sim, model: x, settings: {flash_attn: 'on'}}\n")
    assert parsed.arms[0].name == "off"


# -- FAULTS-3 N11: sizes within every single bound that multiply past what can run --------------------------
LIVE = "live: {kind: docker, name: svc, health: 'http://127.0.0.1:9/health'}\n"
PHASES = "phases: {knobs: [{name: k, apply: [x], revert: [y]}], duration_s: 1e12}\n"


@pytest.mark.parametrize("text, words", [
    (ARM + "workload: {concurrency: [1000000000]}\n",
     "workload.concurrency: 1,000,000,000 is more than 10,000, the most streams a level may have"),
    (ARM + "workload: {depths: [100000000]}\n",
     "workload.depths: 100,000,000 is more than 10,000,000, the most tokens"),
    (ARM + "workload: {arrival: {rates: [1e9], duration_s: 86400}}\n",
     "workload.arrival.rates: rate 1e+09 is more than the 1,000,000 requests per second"),
    (ARM + "workload: {arrival: {rates: [1000], duration_s: 86400}}\n",
     "workload.arrival: rate 1000 for duration_s 86400 schedules 86,400,000 requests, more than the 1,000,000"),
    (ARM + "workload: {arrival: {rates: [1e-300], requests: 2, distribution: constant}}\n",
     "workload.arrival: 2 requests at rate 1e-300 are spread over 1e+300 s, more than the 86,400 s"),
    (ARM + "workload: {sessions: {synthetic: {sessions: 10000, turns: 10000, tool_result_tokens: 1000000}}}\n",
     "workload.sessions.synthetic: sessions x turns x (tool_result_tokens + reply_tokens) is 100,003,200,000,000 "
     "words, more than the 10,000,000"),
    (ARM.replace("model: x}", "model: x, workload: {max_tokens: 1180591620717411303424}}"),
     "arms[0].workload.max_tokens: Input should be less than or equal to 10000000"),
    (ARM.replace("model: x}", "model: x, settings: {ctx: 1099511627776, parallel: 100000}}"),
     "arms[0].settings.parallel: Input should be less than or equal to 10000"),
    (ARM.replace("model: x}", "model: x, speculative: {method: ngram, n_max: 1000000}}"),
     "arms[0].speculative.n_max: Input should be less than or equal to 1024"),
    (ARM + "tune: {space: {speculative.n_max: [2]}, budget_s: 1e12}\n",
     "tune.budget_s: Input should be less than or equal to 604800"),
    (ARM + "tune: {space: {speculative.n_max: [2]}, streams: [1, 100000]}\n",
     "tune.streams: 100,000 is more than 10,000"),
    ("arms: []\ncalibrate: {engine: vllm, method: ngram, n_max: [1, 100000]}\n",
     "calibrate[0].n_max: draft length 100,000 is more than the 1,024"),
    ("arms: []\ncalibrate: {engine: vllm, method: ngram, n_max: [" + ", ".join(map(str, range(1, 101)))
     + "], acceptance: [" + ", ".join(f"0.{i:02d}" for i in range(11)) + "]}\n",
     "calibrate[0]: n_max x acceptance makes 1,101 arms (spec-off included), more than the 1,000"),
    (ARM + LIVE.replace("}", ", watchdog_s: .inf}"), "live.watchdog_s: Input should be a finite number"),
    (ARM + PHASES, "phases.duration_s: Input should be less than or equal to 86400"),
])
def test_a_size_past_its_bound_is_refused_naming_the_bound(text: str, words: str) -> None:
    assert words in refused(text)


def test_sizes_at_their_bounds_pass() -> None:
    from bakeoff.core.config.schema import SyntheticSessions

    config = parse_bakeoff(ARM + "workload: {concurrency: [10000], arrival: {rates: [1000], duration_s: 1000}}\n")
    assert config.workload.arrival is not None and config.workload.arrival.count(1000) == 1_000_000
    parse_bakeoff(ARM + "workload: {depths: [10000000]}\n")
    parse_bakeoff(ARM + "workload: {arrival: {rates: [1e-300], requests: 1}}\n")  # one request spans no time
    assert SyntheticSessions(sessions=10, turns=100, tool_result_tokens=9990, reply_tokens=10)  # 10,000,000 words


def test_a_sweep_making_more_arms_than_a_run_may_have_is_refused_before_one_is_built() -> None:
    values = "[" + ", ".join(map(str, range(1, 11))) + "]"
    text = ("arms:\n  - name: a\n    engine: sim\n    model: x\n    sweep: {settings.threads: VALUES, "
            "settings.batch: VALUES, settings.ubatch: VALUES, settings.parallel: VALUES}\n").replace("VALUES", values)
    assert refused(text).startswith("b.yaml:5: the sweeps make 10,000 arms, more than the 1,000 a run may have")
    space = text.replace("    sweep:", "tune:\n  space:")
    assert "b.yaml:6: tune.space: the space makes 10,000 candidates, more than the 1,000 arms" in refused(space)
