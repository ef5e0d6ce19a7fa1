"""Structured requests on a real llama-server (SmolLM2-135M): examples/structured-cpu.yaml as a user runs it, one
stream level only to stay small (6 timed requests: spec-off and n-gram, each a plain prompt, a JSON-schema
extraction and a tool call).

What it holds the engine to: an answer the grammar ended (finish ``stop``) validates against its schema, every
structured sample carries its validity, the n-gram arm's ``speculation-disengaged`` flag agrees with the
engine's own draft counts, and summary.json and report.md carry the structured section. What it records (printed):
whether SmolLM2's tool call is valid, and whether llama.cpp's n-gram drafter still drafts under a grammar.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from structured_example import check_example_run

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
    check_example_run(run, samples)

