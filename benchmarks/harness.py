"""Is bakeoff's clock exact? Its per-request decode rate against the truth of a paced stream source.

A source in its own process (benchmarks/stream_source.py) streams 256 tokens at a set rate, 1 or 5
tokens per event, and reports when it really wrote the first and last token events (CLOCK_MONOTONIC,
the clock both processes read). For each rate, two clients read the same streams:

- a minimal raw-socket client (timestamp every ``recv``, parse after): if it is not within 1 %, the
  source is the bottleneck and the row says so;
- bakeoff's own path, request for request as a run does it: ``stream_chat``, ``account``, a Sample,
  the foreign-load meter and ``RunDir.append`` (jsonl fsync + SQLite index).

Per row: the median and worst relative error of the decode rate against the truth, how many requests
were within 1 %, and bakeoff's CPU per 1,000 tokens and in cores while streaming (process CPU over
wall time, the source excluded). ``--outlier N`` then sends N requests at one rate and lists the worst
ones with their position, so a periodic stall (every k-th request) shows.

``--streams 64 --stream-rates 25,100`` then reads 64 streams at once through bakeoff's concurrency path
(``run_batch``, as a ``workload.concurrency`` point sends them), from a source that only sleeps between events,
and prints every request's decode rate against the truth and bakeoff's CPU per 1,000 tokens.

``--peers guidellm,aiperf --peer-venv DIR`` adds GuideLLM's and AIPerf's own per-request figures on the same
streams and their CPU (benchmarks/peers.py), each tool from its own environment under DIR.

Usage: ``python benchmarks/harness.py [--rates 100,167,...] [--per-event 1,5] [--outlier 200]``.
Run on a quiet machine and quote the load average printed with the table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import bakeoff.core.engine.client as client_module
from bakeoff.core.engine.client import StreamResult, stream_chat
from bakeoff.core.host.hostinfo import CpuMeter
from bakeoff.core.measure.concurrency import run_batch
from bakeoff.core.measure.definitions import account
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir

sys.path.append(str(Path(__file__).resolve().parent))  # benchmarks/peers.py beside it, also under ``python -P``
from peers import LABELS, PEERS, PeerPoint, run_point


class GcWatch:
    """Every cyclic-GC run of this process: (start ns, duration ns, generation)."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int, int]] = []
        self._start = 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter_ns()
        else:
            self.runs.append((self._start, time.perf_counter_ns() - self._start, info["generation"]))

    def inside(self, t0: int, t1: int) -> list[tuple[int, int, int]]:
        return [r for r in self.runs if t0 <= r[0] <= t1]


GC = GcWatch()
N_TOKENS = 256
RATES = (100, 167, 500, 1000, 2000, 5000, 10000, 20000, 50000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Row:
    rate: int
    per_event: int
    raw_errors: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    tokens: int = 0
    flagged: int = 0
    gc_in_stream: int = 0
    gc_max_ms: float = 0.0
    kernel_clocked: int = 0  # bakeoff's requests whose events carry the kernel's receive time (Linux)
    peers: dict[str, PeerPoint] = field(default_factory=dict)


@dataclass
class PeerRun:
    """Which peers to run, from where, and where they write."""

    tools: list[str]
    env_root: Path
    truth_file: Path
    work: Path
    timeout_s: float


def _truth_rate(truth: dict[str, Any]) -> float:
    return float((truth["n"] - truth["n_first"]) / truth["decode_s"])


def raw_request(port: int, path: str, n: int) -> float:
    """Relative error of a minimal raw-socket client's decode rate against the source's truth."""
    body = json.dumps({"max_tokens": n, "stream": True}).encode()
    reads: list[tuple[int, bytes]] = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % (path.encode(), len(body)) + body)
        while chunk := sock.recv(65536):
            reads.append((time.perf_counter_ns(), chunk))
    buf, offset, stamps, truth = b"", 0, [], None
    for t, chunk in reads:  # parse after: the read that completes a token event stamps it
        buf += chunk
        while (end := buf.find(b"\n\n", offset)) != -1:
            event = buf[offset:end]
            offset = end + 2
            if b'"content":"tok' in event:
                stamps.append((t, event.count(b"tok ")))
            elif b'"truth"' in event:
                truth = json.loads(event[6:])["truth"]
    assert truth is not None and len(stamps) >= 2
    if stamps[-1][0] == stamps[0][0]:
        return float("nan")  # every token event in one read: this client saw no decode window at all
    # the window opens when the first token read arrived: its tokens are before it (bakeoff's definition too)
    before = sum(tokens for t, tokens in stamps if t == stamps[0][0])
    measured = float((truth["n"] - before) / ((stamps[-1][0] - stamps[0][0]) / 1e9))
    return measured / _truth_rate(truth) - 1


class BakeoffPath:
    """One request the way a run makes it: stream, account, sample, meter, store."""

    def __init__(self, base: str, run_dir: Path) -> None:
        self.base = base
        self.clients: dict[str, httpx.Client] = {}  # one per pace, made once (as a run makes one per arm)
        self.run = RunDir(run_dir)
        self.meter = CpuMeter(set())
        self.rep = 0
        self.last_gc: list[tuple[int, int, int]] = []
        self.last_clock = "user"

    def request(self, prefix: str, n: int) -> tuple[float, list[str], float, float]:
        """(relative error vs truth, flags, process CPU s, wall s); GC runs inside the stream go to ``last_gc``."""
        if prefix not in self.clients:
            self.clients[prefix] = httpx.Client(base_url=self.base + prefix)
        http = self.clients[prefix]
        body = {"model": "source", "max_tokens": n, "stream": True, "messages": [{"role": "user", "content": "go"}]}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.meter.start()
        result = stream_chat(http, body, 30.0)
        foreign = self.meter.stop()
        self.last_gc = GC.inside(result.t_send_ns, result.t_done_ns or result.t_send_ns)
        sample = stored_sample(self.run, result, self.rep, foreign_cpu_cores=foreign)
        self.rep += 1
        self.last_clock = result.arrival_clock
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        error = truth_error(result, sample)
        if error is None:
            return float("nan"), [*sample.flags, result.error or "no truth"], cpu, wall
        return error, sample.flags, cpu, wall


def stored_sample(run: RunDir, result: StreamResult, rep: int, **fields: Any) -> Sample:
    """A stream accounted, made a Sample (its flags included) and stored, the way a run does it."""
    sample = Sample(arm="h", engine="openai", prompt="p", mode="greedy", rep=rep, started_at=time.time(), **fields)
    account(result, "usage_per_chunk").apply(sample)
    run.append(sample)
    return sample


def truth_error(result: StreamResult, sample: Sample) -> float | None:
    """The sample's decode rate against the source's truth (relative error); None when either is missing."""
    truth = (result.final or {}).get("truth")
    if result.error or truth is None or sample.decode_tps is None:
        return None
    return sample.decode_tps / _truth_rate(truth) - 1


def _requests_for(rate: int) -> int:
    return 5 if rate < 1000 else 20


def sweep(port: int, rates: list[int], per_events: list[int], run_dir: Path,
          peer_run: PeerRun | None = None) -> list[Row]:
    path = BakeoffPath(f"http://127.0.0.1:{port}", run_dir)
    rows = []
    for per_event in per_events:
        for rate in rates:
            row = Row(rate, per_event)
            url = f"/r/{rate}/{per_event}"
            raw_request(port, url + "/v1/chat/completions", 32)  # warm the connection path
            for _ in range(_requests_for(rate)):
                row.raw_errors.append(raw_request(port, url + "/v1/chat/completions", N_TOKENS))
                err, flags, cpu, wall = path.request(url, N_TOKENS)
                row.errors.append(err)
                row.cpu_s += cpu
                row.wall_s += wall
                row.tokens += N_TOKENS
                row.flagged += any(not f.startswith("foreign-load") for f in flags)
                row.gc_in_stream += len(path.last_gc)
                row.kernel_clocked += path.last_clock == "kernel"
                row.gc_max_ms = max([row.gc_max_ms] + [d / 1e6 for _, d, _ in path.last_gc])
            for tool in peer_run.tools if peer_run else []:
                assert peer_run is not None
                row.peers[tool] = run_point(tool, peer_run.env_root, port, rate, per_event, _requests_for(rate),
                                            N_TOKENS, peer_run.truth_file, peer_run.work, peer_run.timeout_s)
            rows.append(row)
            print(f"  {rate} tok/s × {per_event}/event done: {row_line(row, peer_run.tools if peer_run else [])}",
                  flush=True)  # each row as it is measured: a run cut short keeps what it had
    return rows


def outliers(port: int, rate: int, per_event: int, count: int,
             run_dir: Path) -> tuple[list[tuple[int, float]], list[int]]:
    """(request #, error) for ``count`` requests, and the requests inside whose stream a GC ran."""
    path = BakeoffPath(f"http://127.0.0.1:{port}", run_dir)
    url = f"/r/{rate}/{per_event}"
    out, with_gc = [], []
    for i in range(count):
        out.append((i, path.request(url, N_TOKENS)[0]))
        if path.last_gc:
            with_gc.append(i)
    return out, with_gc


@dataclass
class StreamsRow:
    streams: int
    rate: int
    per_event: int
    errors: list[float] = field(default_factory=list)
    flagged: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    tokens: int = 0
    source_late_s: float = 0.0  # the source's worst lateness against its own schedule


def streams_rows(port: int, streams: int, rates: list[int], per_event: int, batches: int,
                 run_dir: Path) -> list[StreamsRow]:
    """``batches`` batches of ``streams`` requests at each per-stream rate, sent together by ``run_batch`` and
    accounted and stored one by one, as a run's concurrency point does."""
    run, rows = RunDir(run_dir), []
    body = {"model": "source", "max_tokens": N_TOKENS, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    for rate in rates:
        row = StreamsRow(streams, rate, per_event)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/r/{rate}/{per_event}") as http:
            run_batch(http, [dict(body, max_tokens=32)] * streams, 60.0)  # warm the threads and the source
            for b in range(batches):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                batch = run_batch(http, [dict(body) for _ in range(streams)], 60.0)
                for i, result in enumerate(batch.results):
                    sample = stored_sample(run, result, b * streams + i, concurrency=streams)
                    error = truth_error(result, sample)
                    row.errors.append(float("nan") if error is None else error)
                    row.flagged += error is None or bool(sample.flags)
                    truth = (result.final or {}).get("truth")
                    row.source_late_s = max(row.source_late_s, truth["max_late_s"] if truth else 0.0)
                row.cpu_s += time.process_time() - cpu0
                row.wall_s += time.perf_counter() - wall0
                row.tokens += streams * N_TOKENS
        rows.append(row)
        print(f"  {streams} streams × {rate} tok/s done", flush=True)
    return rows


def print_streams(rows: list[StreamsRow]) -> None:
    print("\n| streams | tok/s per stream | tok/event | requests | bakeoff median / worst | within 1 % | flagged "
          "| bakeoff CPU ms per 1k tok | bakeoff cores | aggregate tok/s | source's worst lateness ms |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        within = sum(abs(e) <= 0.01 for e in r.errors if e == e)
        print(f"| {r.streams} | {r.rate} | {r.per_event} | {len(r.errors)} | {_pct(_median(r.errors))} / "
              f"{_pct(_worst(r.errors))} | {within}/{len(r.errors)} | {r.flagged} | {r.cpu_s / r.tokens * 1e6:.1f} "
              f"| {r.cpu_s / r.wall_s:.3f} | {r.tokens / r.wall_s:.0f} | {r.source_late_s * 1e3:.1f} |")


@contextmanager
def stream_source(truth_file: Path | None, sleep: bool = False) -> Iterator[int]:
    """benchmarks/stream_source.py in its own process, listening (its port); ``sleep``: it sleeps between events
    instead of spinning before each (many streams on few cores)."""
    port = _free_port()
    source = subprocess.Popen([sys.executable, str(Path(__file__).with_name("stream_source.py")), str(port),
                               str(truth_file or ""), *(["sleep"] if sleep else [])], stdout=subprocess.PIPE, text=True)
    try:
        assert source.stdout is not None
        source.stdout.readline()  # the source prints its URL once it listens
        yield port
    finally:
        source.terminate()
        source.wait()


def bakeoff_command() -> list[str]:
    """The console script beside this Python, or the CLI through ``python -P`` where bakeoff was installed
    without scripts (``pip install --target``, as on the GPU machine)."""
    script = Path(sys.executable).with_name("bakeoff")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-P", "-c", "from bakeoff.core.cli import main; main()"]


def cli_run(port: int, truth_file: Path, rate: int, per_event: int, count: int,
            out: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``count`` requests through the real ``bakeoff run`` (progress display, store, meter: everything), each
    stored sample joined to the source's truth line by order (one arm, one pass, sequential requests, no warm-up,
    no gates: every request the source sees is a sample)."""
    config = out / "harness.yaml"
    config.write_text(f"""arms:
  - {{name: source, engine: openai, url: "http://127.0.0.1:{port}/r/{rate}/{per_event}"}}
workload: {{prompts: [prose], max_tokens: {N_TOKENS}, reps: {count}, warmup: 0, gates: [], request_timeout_s: 30}}
""")
    truth_file.write_text("")
    subprocess.run([*bakeoff_command(), "run", str(config), "--out", str(out / "runs")], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    truths = [json.loads(line) for line in truth_file.read_text().splitlines()]
    (samples_path,) = (out / "runs").glob("*/samples.jsonl")
    samples = sorted((json.loads(line) for line in samples_path.read_text().splitlines()), key=lambda s: s["rep"])
    return list(zip(samples, truths, strict=True))


def cli_error(sample: dict[str, Any], truth: dict[str, Any], first_event_only: int | None = None) -> float:
    """A stored sample's decode rate against the truth; ``first_event_only`` (tokens per event): as the window
    was counted before 2026-12-03, with only the first event's tokens before it, whatever the first read held."""
    if not sample.get("decode_tps"):
        return float("nan")
    if first_event_only is None:
        return float(sample["decode_tps"] / _truth_rate(truth) - 1)
    return float((sample["completion_tokens"] - first_event_only) / sample["decode_s"] / _truth_rate(truth) - 1)


def _median(values: list[float]) -> float:
    real = [v for v in values if v == v]
    return statistics.median(real) if real else float("nan")


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:+.2%}"


def _worst(errors: list[float]) -> float:
    return max(errors, key=lambda e: abs(e) if e == e else float("inf")) if errors else float("nan")


def _peer_cells(p: PeerPoint | None) -> str:
    """median / worst, within 1 %, CPU ms per 1k tokens and cores over the streaming window, whole-run CPU s."""
    if p is None or not p.errors:
        why = "not run" if p is None else p.note.replace("|", "/")
        return f" {why} | | | | |"
    within = sum(abs(e) <= 0.01 for e in p.errors if e == e)
    cpu_k = f"{p.window_cpu_s / p.tokens * 1e6:.1f}" if p.tokens else "n/a"
    cores = f"{p.window_cpu_s / p.window_s:.3f}" if p.window_s > 0 else "n/a"
    return (f" {_pct(_median(p.errors))} / {_pct(_worst(p.errors))} | {within}/{len(p.errors)} | {cpu_k} | {cores} "
            f"| {p.total_cpu_s:.1f} |")


def row_line(r: Row, peers: list[str]) -> str:
    within = sum(abs(e) <= 0.01 for e in r.errors if e == e)
    line = (f"| {r.rate} | {r.per_event} | {len(r.errors)} | {_pct(_median(r.raw_errors))} / "
            f"{_pct(_worst(r.raw_errors))} | {_pct(_median(r.errors))} / {_pct(_worst(r.errors))} | "
            f"{within}/{len(r.errors)} | {r.flagged} | {r.cpu_s / r.tokens * 1e6:.1f} | {r.cpu_s / r.wall_s:.3f} "
            f"| {r.gc_in_stream} |")
    return line + "".join(_peer_cells(r.peers.get(tool)) for tool in peers)


def print_table(rows: list[Row], peers: list[str] | None = None) -> None:
    """The table; with ``peers``, each tool's columns after bakeoff's (its median / worst, within 1 %, CPU ms
    per 1k tokens and cores over the streaming window, and the whole invocation's CPU seconds)."""
    peers = peers or []
    head = ("| tok/s | tok/event | requests | raw client median / worst | bakeoff median / worst | bakeoff within 1 % "
            "| flagged | bakeoff CPU ms per 1k tok | bakeoff cores while streaming | GC runs inside streams |")
    rule = "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"
    for tool in peers:
        name = LABELS[tool]
        head += (f" {name} median / worst | {name} within 1 % | {name} CPU ms per 1k tok | {name} cores while "
                 f"streaming | {name} CPU s, whole run |")
        rule += "---|---:|---:|---:|---:|"
    print("\n" + head + "\n" + rule)
    for r in rows:
        print(row_line(r, peers))
    kernel, total = sum(r.kernel_clocked for r in rows), sum(len(r.errors) for r in rows)
    print(f"\nbakeoff's arrival clock: the kernel's receive time on {kernel} of {total} requests, the reader's "
          f"clock on the rest (the raw client always reads its own clock)")
    absent = {t: p.note for r in rows for t, p in r.peers.items() if not p.errors and p.note}
    if not peers:
        print("\nGuideLLM, AIPerf: not run (give --peers guidellm,aiperf --peer-venv DIR)")
    for tool, note in absent.items():
        print(f"\n{LABELS[tool]}: no figures at some points; e.g. {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default=",".join(map(str, RATES)))
    ap.add_argument("--per-event", default="1,5")
    ap.add_argument("--outlier", type=int, default=200, help="requests in the periodic-outlier check (0: skip)")
    ap.add_argument("--outlier-rate", type=int, default=20000)
    ap.add_argument("--cli", type=int, default=0, help="also send this many requests through `bakeoff run` itself")
    ap.add_argument("--cli-rate", type=int, default=None, help="tok/s of the --cli requests (default --outlier-rate)")
    ap.add_argument("--cli-per-event", type=int, default=1, help="tokens per event of the --cli requests")
    ap.add_argument("--streams", type=int, default=0, help="also read this many streams at once (0: skip)")
    ap.add_argument("--stream-rates", default="25,100", help="tok/s of each stream with --streams")
    ap.add_argument("--stream-batches", type=int, default=2, help="batches of --streams requests per rate")
    ap.add_argument("--only-streams", action="store_true", help="skip the sequential sweep and the outlier check")
    ap.add_argument("--peers", default="", help="comma-separated peers to run on the same streams: guidellm,aiperf")
    ap.add_argument("--peer-venv", type=Path, default=None,
                    help="folder holding guidellm/ and aiperf/: a venv each, or a pip --target folder each")
    ap.add_argument("--peer-timeout", type=float, default=240.0, help="seconds one tool may take at one point")
    ap.add_argument("--clock", choices=("kernel", "user"), default="kernel",
                    help="user: stamp bakeoff's events when each read returns (the behaviour before kernel stamps)")
    ap.add_argument("--gc", choices=("paused", "on"), default="paused",
                    help="on: leave the garbage collector running during streams (the behaviour before the fix)")
    args = ap.parse_args()
    tools = [t for t in args.peers.split(",") if t]
    unknown = [t for t in tools if t not in PEERS]
    if unknown:
        ap.error(f"--peers: unknown tool(s) {', '.join(unknown)} (known: {', '.join(PEERS)})")
    if tools and args.peer_venv is None:
        ap.error("--peers needs --peer-venv DIR (DIR/guidellm and DIR/aiperf: each tool's own environment)")
    if args.gc == "on":
        import contextlib

        client_module._gc_pause = contextlib.nullcontext()  # type: ignore[assignment]
    if args.clock == "user":
        client_module._ask_kernel_stamps = lambda sock: False
    scratch = Path(tempfile.mkdtemp(prefix="bakeoff-harness-"))
    truth_file = scratch / "truth.jsonl"
    with stream_source(truth_file) as port:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores); "
              f"python {sys.version.split()[0]}; gc thresholds {gc.get_threshold()}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            peer_run = (PeerRun(tools, args.peer_venv, truth_file, scratch / "peers", args.peer_timeout)
                        if tools else None)
            if not args.only_streams:
                rows = sweep(port, [int(x) for x in args.rates.split(",")],
                             [int(x) for x in args.per_event.split(",")], Path(tmp) / "sweep", peer_run)
                print_table(rows, tools)
            if tools:
                print(f"\npeers' own result files and consoles: {scratch / 'peers'}")
            if args.streams:
                with stream_source(None, sleep=True) as sleeping:
                    print_streams(streams_rows(sleeping, args.streams, [int(x) for x in args.stream_rates.split(",")],
                                               1, args.stream_batches, Path(tmp) / "streams"))
            if args.outlier and not args.only_streams:
                got, with_gc = outliers(port, args.outlier_rate, 1, args.outlier, Path(tmp) / "outlier")
                errs = [e for _, e in got if e == e]
                worst = sorted(got, key=lambda x: -abs(x[1]) if x[1] == x[1] else float("-inf"))[:5]
                print(f"\noutlier check: {args.outlier} requests at {args.outlier_rate} tok/s, 1 token/event: median "
                      f"{_pct(statistics.median(errs))}, within 1 %: {sum(abs(e) <= 0.01 for e in errs)}/{len(got)}; "
                      f"worst (request #, error): " + ", ".join(f"#{i} {_pct(e)}" for i, e in worst)
                      + f"; a GC ran inside the stream of {len(with_gc)} request(s): {with_gc[:20]}")
        if args.cli:
            rate = args.cli_rate or args.outlier_rate
            pairs = cli_run(port, truth_file, rate, args.cli_per_event, args.cli, scratch)
            got_cli = [(sample["rep"], cli_error(sample, truth), sample["flags"]) for sample, truth in pairs]
            errs = [e for _, e, _ in got_cli if e == e]
            worst_cli = sorted(got_cli, key=lambda x: -abs(x[1]) if x[1] == x[1] else float("-inf"))[:5]
            before = [e for s, t in pairs if (e := cli_error(s, t, args.cli_per_event)) == e]
            late = sum((s.get("n_first") or 0) > args.cli_per_event for s, _ in pairs)
            # the plain reader on the same source and pace, in the same minute: the fair comparison
            path = f"/r/{rate}/{args.cli_per_event}/v1/chat/completions"
            raw = [raw_request(port, path, N_TOKENS) for _ in range(args.cli)]

            def flagged(flags: list[str]) -> str:
                return "yes" if [f for f in flags if not f.startswith("foreign-load")] else "no"

            print(f"\n`bakeoff run`: {len(got_cli)} requests at {rate} tok/s, {args.cli_per_event} token(s)/event: "
                  f"median {_pct(_median(errs))}, within 1 %: {sum(abs(e) <= 0.01 for e in errs)}/{len(got_cli)}; "
                  "worst (request #, error, flagged): "
                  + ", ".join(f"#{i} {_pct(e)} {flagged(fl)}" for i, e, fl in worst_cli))
            print(f"first token read carried several events on {late} of {len(got_cli)} requests; counting only the "
                  f"first event's tokens out of the window (before 2026-12-03) the same samples read: median "
                  f"{_pct(_median(before))}, worst {_pct(_worst(before))}, within 1 %: "
                  f"{sum(abs(e) <= 0.01 for e in before)}/{len(before)}")
            print(f"raw client, the same point right after: median {_pct(_median(raw))}, worst {_pct(_worst(raw))}, "
                  f"within 1 %: {sum(abs(e) <= 0.01 for e in raw)}/{len(raw)}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
