"""GuideLLM and AIPerf on the harness benchmark's stream source: each tool's own per-request figure against
the source's truth, and the CPU the tool burns to get it.

Each tool runs from an environment of its own, never bakeoff's: ``DIR/guidellm`` and ``DIR/aiperf`` under
``--peer-venv DIR``, each either a virtual environment (``DIR/<tool>/bin/python``) or a ``pip install --target``
folder, run with this interpreter and the folder first on PYTHONPATH (how the GPU machine installs carried
wheels). A tool without one is left out and the table says so.

Per sweep point a tool is started once, sends the point's requests one at a time (GuideLLM's synchronous
profile, AIPerf at concurrency 1), and writes its own result file; we read each request's decode rate from it
(GuideLLM: 1000 / ``inter_token_latency_ms``; AIPerf: ``output_token_throughput_per_user``, with
``--use-server-token-count``; both are one over the tool's inter-token latency) and join it, in order, to the
truth lines the source appended while the tool ran. Its CPU is the whole process tree's (psutil, polled every
10 ms, each process's last reading kept once it is gone): per 1,000 tokens and in cores over the streaming
window (the first request's first token event to the last one's last), as bakeoff's figure is over its
request path; the whole invocation's CPU (imports and start-up included) is kept beside it.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

PEERS = ("guidellm", "aiperf")
LABELS = {"guidellm": "GuideLLM", "aiperf": "AIPerf"}

# A word-level tokenizer in which every "tok" of the source's text is one token, so a tool that counts tokens
# itself counts exactly what the source sent; written as files, so neither tool reaches for the network.
_TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, c in enumerate(("<unk>", "<s>", "</s>"))],
    "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
    "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "tok": 3, "go": 4},
              "unk_token": "<unk>"},
}
_TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
                     "eos_token": "</s>", "model_max_length": 1_000_000}


def write_tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(_TOKENIZER))
    (folder / "tokenizer_config.json").write_text(json.dumps(_TOKENIZER_CONFIG))
    return folder


# -- where a tool lives ------------------------------------------------------------------------------------


def tool_python(tool: str, env_root: Path) -> tuple[list[str], dict[str, str]] | str:
    """(argv prefix that runs ``python -m <tool>``, extra environment), or why the tool is absent."""
    home = env_root / tool
    venv_python = home / "bin" / "python"
    if venv_python.exists():
        return [str(venv_python), "-m", tool], {}
    if (home / tool).is_dir():  # a --target folder: this interpreter, the folder first on the path
        return [sys.executable, "-m", tool], {"PYTHONPATH": str(home)}
    return f"no environment at {home} (a venv with {tool} installed, or a pip --target folder)"


# -- how each tool is asked ----------------------------------------------------------------------------------


def guidellm_args(base_url: str, tokenizer: Path, count: int, n_tokens: int, out: Path) -> list[str]:
    """GuideLLM 0.8's scenario file: synchronous, ``count`` requests of ``n_tokens``, a JSON report."""
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": base_url, "model": str(tokenizer), "validate_backend": False},
        "profile": {"kind": "synchronous"},
        "constraints": [{"kind": "max_requests", "count": count}],
        "data": [{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": n_tokens}],
        "outputs": [{"kind": "json", "path": str(out / "benchmarks.json")}],
    }}
    (out / "scenario.json").write_text(json.dumps(scenario))
    return ["run", "-c", str(out / "scenario.json"), "--disable-progress"]


def aiperf_args(base_url: str, tokenizer: Path, count: int, n_tokens: int, out: Path) -> list[str]:
    """AIPerf 0.13: concurrency 1, ``count`` streamed chat requests, server token counts, per-request records.
    No UI, and no server-metrics or GPU-telemetry scraping: the source has neither endpoint."""
    return ["profile", "--model", "source", "--url", base_url, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", str(tokenizer), "--use-server-token-count", "--concurrency", "1",
            "--request-count", str(count), "--output-tokens-mean", str(n_tokens),
            "--synthetic-input-tokens-mean", "8", "--artifact-dir", str(out), "--export-level", "records",
            "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]


# -- what each tool wrote ------------------------------------------------------------------------------------


def parse_guidellm(path: Path) -> list[float | None]:
    """Each request's decode rate (tok/s, None for a failed one) from GuideLLM's ``benchmarks.json``, in the
    order the requests were sent."""
    doc = json.loads(path.read_text())
    if not doc.get("benchmarks"):
        raise ValueError(f"{path}: no 'benchmarks' in GuideLLM's report")
    requests = doc["benchmarks"][0]["requests"]
    rows: list[tuple[float, float | None]] = []
    for status in ("successful", "errored", "incomplete"):
        for r in requests.get(status) or []:
            itl = r.get("inter_token_latency_ms")
            rate = 1000.0 / itl if status == "successful" and itl else None
            rows.append((float(r["request_start_time"] or r["info"]["timings"]["request_start"]), rate))
    return [rate for _, rate in sorted(rows, key=lambda x: x[0])]


def parse_aiperf(path: Path) -> list[float | None]:
    """Each request's decode rate (tok/s, None for a failed one) from AIPerf's ``profile_export.jsonl``, in the
    order the requests were sent (profiling phase only)."""
    rows: list[tuple[int, float | None]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        meta = record.get("metadata") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        if "request_start_ns" not in meta:
            raise ValueError(f"{path}:{number}: record has no metadata.request_start_ns")
        value = (record.get("metrics") or {}).get("output_token_throughput_per_user", {}).get("value")
        failed = record.get("error") or meta.get("was_cancelled")
        rows.append((int(meta["request_start_ns"]), None if failed or value is None else float(value)))
    return [rate for _, rate in sorted(rows, key=lambda x: x[0])]


def truth_rate(truth: dict[str, Any]) -> float:
    return float((truth["n"] - truth["n_first"]) / truth["decode_s"])


def errors_vs_truth(rates: list[float | None], truths: list[dict[str, Any]]) -> list[float]:
    """Relative error of each request's rate against the source's truth for the same request (NaN: failed)."""
    if len(rates) != len(truths):
        raise ValueError(f"the tool reported {len(rates)} requests, the source served {len(truths)}")
    return [float("nan") if r is None else r / truth_rate(t) - 1 for r, t in zip(rates, truths, strict=True)]


# -- its CPU ---------------------------------------------------------------------------------------------------


class TreeCpu:
    """CPU seconds of a process and all its descendants, polled every ``interval_s``: [(perf_counter_ns, s)]."""

    def __init__(self, pid: int, interval_s: float = 0.01) -> None:
        self.samples: list[tuple[int, float]] = []
        self._root = psutil.Process(pid)
        self._procs: dict[int, psutil.Process] = {pid: self._root}
        self._last: dict[int, float] = {}
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            if tick % 10 == 0:  # new children: looked for every 10th poll (the listing costs more than a read)
                try:
                    for child in self._root.children(recursive=True):
                        self._procs.setdefault(child.pid, child)
                except psutil.Error:
                    pass
            for pid, proc in list(self._procs.items()):
                try:
                    t = proc.cpu_times()
                    self._last[pid] = t.user + t.system
                except psutil.Error:
                    del self._procs[pid]  # gone: its last reading stays in the sum
            self.samples.append((time.perf_counter_ns(), sum(self._last.values())))
            tick += 1
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0_ns: int, t1_ns: int) -> float:
        """CPU seconds spent between two instants, read off the polled series by linear interpolation."""
        return _at(self.samples, t1_ns) - _at(self.samples, t0_ns)


def _at(samples: list[tuple[int, float]], t_ns: int) -> float:
    if not samples:
        return 0.0
    if t_ns <= samples[0][0]:
        return samples[0][1]
    for (ta, ca), (tb, cb) in itertools.pairwise(samples):
        if ta <= t_ns <= tb:
            return ca if tb == ta else ca + (cb - ca) * (t_ns - ta) / (tb - ta)
    return samples[-1][1]


# -- one tool at one point -------------------------------------------------------------------------------------


@dataclass
class PeerPoint:
    tool: str
    errors: list[float] = field(default_factory=list)
    window_cpu_s: float = 0.0  # the tree's CPU over the streaming window
    window_s: float = 0.0
    tokens: int = 0
    total_cpu_s: float = 0.0  # the whole invocation, start-up included
    wall_s: float = 0.0
    note: str = ""  # why the point has no figures


def run_point(tool: str, env_root: Path, port: int, rate: int, per_event: int, count: int, n_tokens: int,
              truth_file: Path, work: Path, timeout_s: float) -> PeerPoint:
    point = PeerPoint(tool)
    found = tool_python(tool, env_root)
    if isinstance(found, str):
        point.note = found
        return point
    argv, extra_env = found
    out = work / f"{tool}-{rate}-{per_event}"
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(work / "tokenizer")
    base_url = f"http://127.0.0.1:{port}/r/{rate}/{per_event}"
    make_args = guidellm_args if tool == "guidellm" else aiperf_args
    args = make_args(base_url, tokenizer, count, n_tokens, out)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # not bakeoff's path
    env.update(extra_env, HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1", NO_COLOR="1", PYTHONUNBUFFERED="1")
    if tool == "guidellm":
        env["HF_HUB_OFFLINE"] = "1"  # (AIPerf's offline mode looks local tokenizer paths up in the hub cache)
    served_before = len(truth_file.read_text().splitlines()) if truth_file.exists() else 0
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with (out / "console.txt").open("w") as console:
        proc = subprocess.Popen([*argv, *args], stdout=console, stderr=subprocess.STDOUT, env=env, cwd=out)
        meter = TreeCpu(proc.pid)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            point.note = f"timed out after {timeout_s:.0f} s"
        finally:
            meter.stop()
    point.wall_s = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    polled = meter.samples[-1][1] if meter.samples else 0.0
    point.total_cpu_s = max(reaped, polled)  # rusage misses orphans, polling misses each process's last 10 ms
    truths = [json.loads(x) for x in truth_file.read_text().splitlines()[served_before:]]
    if code != 0 and not point.note:
        point.note = f"exit {code} (see {out / 'console.txt'})"
    result = out / ("benchmarks.json" if tool == "guidellm" else "profile_export.jsonl")
    try:
        rates = (parse_guidellm if tool == "guidellm" else parse_aiperf)(result)
        point.errors = errors_vs_truth(rates, truths)
    except (OSError, ValueError, KeyError) as e:
        point.note = point.note or f"{type(e).__name__}: {e}"
        return point
    if truths:
        t_first, t_last = truths[0]["t_first_ns"], truths[-1]["t_last_ns"]
        point.window_cpu_s = meter.between(t_first, t_last)
        point.window_s = (t_last - t_first) / 1e9
        point.tokens = sum(t["n"] for t in truths)
    return point
