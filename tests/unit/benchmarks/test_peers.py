"""benchmarks/peers.py: reading GuideLLM's and AIPerf's own result files (real ones, tests/fixtures/peers: each
tool sent 3 requests of 256 tokens at 2,000 tok/s, 5 tokens an event, to benchmarks/stream_source.py, whose truth
lines sit beside them), joining them to the source's truth, and the process-tree CPU meter."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "peers"


def _module() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "peers.py"
    spec = importlib.util.spec_from_file_location("peers", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


peers = _module()


def _truths(tool: str) -> list[dict[str, float]]:
    return [json.loads(x) for x in (FIXTURES / f"{tool}_truth.jsonl").read_text().splitlines()]


def _guidellm(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    doc = json.loads(gzip.decompress((FIXTURES / "guidellm_benchmarks.json.gz").read_bytes()))
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path, doc


def test_guidellm_rate_is_one_over_its_inter_token_latency_in_send_order(tmp_path: Path) -> None:
    path, doc = _guidellm(tmp_path)
    requests = doc["benchmarks"][0]["requests"]["successful"]  # type: ignore[index]
    rates = peers.parse_guidellm(path)
    assert len(rates) == 3
    # GuideLLM's ITL is (last token read - first token read) / (tokens - 1), from its own timings
    for rate, r in zip(rates, sorted(requests, key=lambda r: r["request_start_time"]), strict=True):
        t = r["info"]["timings"]
        itl_s = (t["last_token_iteration"] - t["first_token_iteration"]) / (r["output_tokens"] - 1)
        assert rate == pytest.approx(1 / itl_s, rel=1e-6)
    requests.reverse()  # the report's order is not the send order
    path.write_text(json.dumps(doc))
    assert peers.parse_guidellm(path) == rates


def test_guidellm_failed_request_keeps_its_place_without_a_rate(tmp_path: Path) -> None:
    path, doc = _guidellm(tmp_path)
    groups = doc["benchmarks"][0]["requests"]  # type: ignore[index]
    ordered = sorted(groups["successful"], key=lambda r: r["request_start_time"])
    groups["errored"] = [ordered[1]]
    groups["successful"] = [ordered[0], ordered[2]]
    path.write_text(json.dumps(doc))
    rates = peers.parse_guidellm(path)
    assert rates[1] is None and rates[0] is not None and rates[2] is not None
    errors = peers.errors_vs_truth(rates, _truths("guidellm"))
    assert errors[1] != errors[1]  # NaN: no figure for the failed request


def test_guidellm_error_against_truth_shows_its_first_event_accounting(tmp_path: Path) -> None:
    """At 5 tokens an event the source's window holds 251 tokens after the first event; GuideLLM divides it by
    255 (tokens - 1), so it reads high by about 255/251 - 1 = 1.6 % plus its own clock's error."""
    path, _ = _guidellm(tmp_path)
    errors = peers.errors_vs_truth(peers.parse_guidellm(path), _truths("guidellm"))
    truths = _truths("guidellm")
    assert all(t["n"] == 256 and t["n_first"] == 5 for t in truths)
    for e in errors:
        assert 0.0 < e < 0.2
    assert min(errors) == pytest.approx(255 / 251 - 1, abs=0.01)


def test_aiperf_rate_is_its_per_user_throughput_in_send_order(tmp_path: Path) -> None:
    lines = (FIXTURES / "aiperf_profile_export.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    rates = peers.parse_aiperf(FIXTURES / "aiperf_profile_export.jsonl")
    assert len(rates) == 3
    for rate, rec in zip(rates, sorted(records, key=lambda r: r["metadata"]["request_start_ns"]), strict=True):
        m = rec["metrics"]
        # with --use-server-token-count: ITL = decode duration / (server's completion tokens - 1)
        assert m["usage_completion_tokens"]["value"] == 256
        itl_ms = m["decode_duration"]["value"] / (m["output_sequence_length"]["value"] - 1)
        assert rate == pytest.approx(1000 / itl_ms, rel=1e-6)
    shuffled = tmp_path / "profile_export.jsonl"
    shuffled.write_text("\n".join(reversed(lines)) + "\n")
    assert peers.parse_aiperf(shuffled) == rates
    errors = peers.errors_vs_truth(rates, _truths("aiperf"))
    assert min(abs(e) for e in errors) < 0.05


def test_aiperf_error_record_and_warmup_phase(tmp_path: Path) -> None:
    records = [json.loads(x) for x in (FIXTURES / "aiperf_profile_export.jsonl").read_text().splitlines()]
    records.sort(key=lambda r: r["metadata"]["request_start_ns"])
    records[0]["error"] = {"code": 500, "type": "ServerError", "message": "boom"}
    warm = json.loads(json.dumps(records[2]))
    warm["metadata"]["benchmark_phase"] = "warmup"
    warm["metadata"]["request_start_ns"] -= 10**9
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [warm, *records]) + "\n")
    rates = peers.parse_aiperf(path)
    assert len(rates) == 3 and rates[0] is None and all(r is not None for r in rates[1:])


def test_aiperf_record_without_start_names_the_field(tmp_path: Path) -> None:
    rec = json.loads((FIXTURES / "aiperf_profile_export.jsonl").read_text().splitlines()[0])
    del rec["metadata"]["request_start_ns"]
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match="request_start_ns"):
        peers.parse_aiperf(path)


def test_count_mismatch_with_the_source_is_an_error() -> None:
    with pytest.raises(ValueError, match="reported 2 requests, the source served 3"):
        peers.errors_vs_truth([100.0, 100.0], _truths("aiperf"))


def test_tool_environment_venv_target_folder_or_absent(tmp_path: Path) -> None:
    (tmp_path / "guidellm" / "bin").mkdir(parents=True)
    (tmp_path / "guidellm" / "bin" / "python").touch()
    (tmp_path / "aiperf" / "aiperf").mkdir(parents=True)
    venv = peers.tool_python("guidellm", tmp_path)
    assert venv == ([str(tmp_path / "guidellm" / "bin" / "python"), "-m", "guidellm"], {})
    target = peers.tool_python("aiperf", tmp_path)
    assert target == ([sys.executable, "-m", "aiperf"], {"PYTHONPATH": str(tmp_path / "aiperf")})
    absent = peers.tool_python("aiperf", tmp_path / "nowhere")
    assert isinstance(absent, str) and "no environment at" in absent


def test_cpu_between_two_instants_is_interpolated() -> None:
    samples = [(0, 0.0), (100, 1.0), (200, 1.0), (300, 3.0)]
    assert peers._at(samples, 50) == pytest.approx(0.5)
    assert peers._at(samples, 250) == pytest.approx(2.0)
    assert peers._at(samples, -5) == 0.0 and peers._at(samples, 999) == 3.0


def test_tree_meter_counts_a_grandchild() -> None:
    """A child that starts a grandchild which burns 0.3 s of CPU: the tree's CPU includes it."""
    burn = ("import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\ntime.sleep(0.5)")
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    proc = subprocess.Popen([sys.executable, "-c", code])
    meter = peers.TreeCpu(proc.pid)
    proc.wait()
    meter.stop()
    assert meter.samples[-1][1] >= 0.3
