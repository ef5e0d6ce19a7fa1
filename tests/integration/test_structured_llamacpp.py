"""Structured requests on a real llama-server (SmolLM2-135M): examples/structured-cpu.yaml as a user runs it, one
stream level only to stay small (6 timed requests: spec-off and n-gram, each a plain prompt, a JSON-schema
extraction and a tool call).

What it holds the engine to: an answer the grammar ended (finish ``stop``) validates against its schema, every
structured sample carries its validity, the n-gram arm's ``speculation-disengaged`` flag agrees with the
engine's own draft counts, and summary.json and report.md carry the structured section. What it records (printed):
whether SmolLM2's tool call is valid, and whether llama.cpp's n-gram drafter still drafts under a grammar.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from bakeoff.core.results.sample import Sample

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "structured-cpu.yaml"


def test_structured_cpu_example_on_llama_server(llama_server: Path, smollm2: Path, tmp_path: Path,
                                                run_bakeoff: Callable[[Path], tuple[Path, list[Sample]]]) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    config["workload"]["concurrency"] = [1]  # the example also runs 2 streams; one level keeps CI short
    cfg = tmp_path / "structured.yaml"
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
    assert "**Structured requests (tool calls, JSON schema)**" in (run / "report" / "report.md").read_text()
    print({arm: {p: (by[(arm, p)].valid, by[(arm, p)].invalid_reason, by[(arm, p)].drafted, by[(arm, p)].accepted,
                     by[(arm, p)].finish_reason, by[(arm, p)].completion_tokens, by[(arm, p)].decode_tps)
                 for p in ("edit_code", "json_order", "tool_weather")} for arm in ("spec-off", "ngram")})
