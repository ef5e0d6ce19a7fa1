"""Config validation: unknown keys are errors naming the key and its line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff

GOOD = """\
name: t
arms:
  - name: a
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2, n_max: 3}
    settings: {ctx: 2048, threads: 2}
workload:
  max_tokens: 64
  modes: [greedy, sampled]
"""


def test_good_file_parses_with_defaults() -> None:
    cfg = parse_bakeoff(GOOD)
    arm = cfg.arms[0]
    assert arm.speculative.method == "draft" and arm.speculative.n_max == 3
    assert arm.settings.host == "127.0.0.1"  # loopback unless the user says otherwise
    assert cfg.workload.fixed_length is True and cfg.workload.warmup == 1
    assert cfg.baseline_arm == "a"


def test_mistyped_settings_key_names_key_and_line() -> None:
    text = GOOD.replace("ctx: 2048", "ctxx: 2048")
    with pytest.raises(ConfigError) as err:
        parse_bakeoff(text, "f.yaml")
    assert "f.yaml:7: arms[0].settings.ctxx: unknown key" in str(err.value)


def test_unknown_top_level_and_workload_keys() -> None:
    text = GOOD + "  max_token: 5\nextra: 1\n"
    with pytest.raises(ConfigError) as err:
        parse_bakeoff(text, "f.yaml")
    msg = str(err.value)
    assert "f.yaml:11: workload.max_token: unknown key" in msg
    assert "f.yaml:12: extra: unknown key" in msg


def test_yaml_boolean_arm_name_is_reported() -> None:
    with pytest.raises(ConfigError, match=r"arms\[0\].name: Input should be a valid string"):
        parse_bakeoff(GOOD.replace("name: a", "name: off"))


def test_unknown_method_and_mode_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"speculative\.method"):
        parse_bakeoff(GOOD.replace("method: draft", "method: medusa"))
    with pytest.raises(ConfigError, match="unknown sampling mode 'creative'"):
        parse_bakeoff(GOOD.replace("[greedy, sampled]", "[creative]"))


def test_arm_needs_model_or_url_and_unique_names() -> None:
    with pytest.raises(ConfigError, match="needs 'model'"):
        parse_bakeoff("arms:\n  - {name: x, engine: openai}\n")
    with pytest.raises(ConfigError, match="two arms are named 'x'"):
        parse_bakeoff("arms:\n  - {name: x, engine: openai, url: 'http://h'}\n"
                      "  - {name: x, engine: openai, url: 'http://h'}\n")


def test_schema_command_prints_json_schema() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert "arms" in schema["properties"]
    assert schema["$defs"]["Settings"]["additionalProperties"] is False
