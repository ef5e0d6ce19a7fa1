"""Start TabbyAPI the way bakeoff's exllama adapter does and save what it answers, byte for byte.

The saved files become tests/fixtures/exllama/: raw SSE streams (spec off and with a draft), /health,
/v1/models, /v1/model, /props, /v1/token/encode, the config.yml the adapter wrote and the engine log
with its per-request ``Metrics`` lines. Uses the adapter's own launch_spec, so the capture also
checks that what the adapter writes starts a real TabbyAPI.

    python benchmarks/gpu/capture_tabby.py OUT_DIR LABEL MODEL_DIR [draft|ngram DRAFT_DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bakeoff.core import build_launch
from bakeoff.core.config.schema import Arm, Workload
from bakeoff.core.engine.launcher import free_port
from bakeoff.engines.exllama import ExllamaAdapter

PROMPT = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]


def _save(path: Path, response: httpx.Response) -> None:
    path.write_text(f"HTTP {response.status_code}\n{response.text}\n")


def _stream(http: httpx.Client, body: dict[str, Any], path: Path) -> None:
    t0 = time.perf_counter()
    with http.stream("POST", "/v1/chat/completions", json=body, timeout=120) as r, path.open("wb") as f:
        for chunk in r.iter_raw():
            f.write(chunk)
    print(f"  {path.name}: HTTP {r.status_code}, {time.perf_counter() - t0:.2f} s")


def capture(out: Path, label: str, model: str, method: str = "none", draft: str | None = None) -> None:
    out = out / label
    out.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {"method": method}
    if method in ("draft", "dflash"):
        spec.update(draft_model=draft, n_max=4)
    elif method == "ngram":
        spec.update(n_max=4)
    arm = Arm.model_validate({"name": label, "engine": "exllama", "model": model, "speculative": spec,
                              "settings": {"ctx": 4096, "parallel": 1}})
    adapter = ExllamaAdapter()
    adapter.preflight(arm)
    port = free_port()
    workdir = out / "work"
    workdir.mkdir(exist_ok=True)
    ls = build_launch(adapter, arm, port, workdir)
    for rel, content in ls.files.items():
        (workdir / rel).write_text(content)
    (out / "config.yml").write_text(ls.files["config.yml"])
    log = (out / "engine.log").open("wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(ls.argv, cwd=ls.cwd, env={**os.environ, **ls.env}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base) as http:
            first_error = None
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"{label}: TabbyAPI exited with {proc.returncode} before it was ready")
                try:
                    r = http.get("/health", timeout=2)
                    if r.status_code == 200:
                        break
                except httpx.HTTPError as exc:
                    first_error = first_error or f"{type(exc).__name__}: {exc}"
                time.sleep(0.1)
                if time.perf_counter() - t0 > 300:
                    raise SystemExit(f"{label}: not ready after 300 s")
            boot = time.perf_counter() - t0
            print(f"{label}: ready in {boot:.1f} s (before listening: {first_error})")
            (out / "boot.json").write_text(json.dumps({"boot_s": boot, "before_listen": first_error}))
            _save(out / "health.txt", r)
            for name, path in (("v1_models", "/v1/models"), ("v1_model", "/v1/model"), ("props", "/props")):
                _save(out / f"{name}.txt", http.get(path, timeout=10))
            _save(out / "token_encode.txt", http.post("/v1/token/encode", json={"text": "Hello, world"}))
            model_id = http.get("/v1/model").json().get("id")
            base_body = {"model": model_id, "messages": PROMPT, "stream": True, "temperature": 0.0,
                         "stream_options": {"include_usage": True}}
            fields = adapter.request_fields(arm, _workload(64))
            _stream(http, {**base_body, "max_tokens": 64, **fields}, out / "chat_stream_min_tokens.sse")
            _stream(http, {**base_body, "max_tokens": 64, **fields}, out / "chat_stream_min_tokens_repeat.sse")
            _stream(http, {**base_body, "max_tokens": 64, "ignore_eos": True}, out / "chat_stream_ignore_eos.sse")
            _stream(http, {**base_body, "max_tokens": 64}, out / "chat_stream_plain.sse")
            r = http.post("/v1/chat/completions", json={**base_body, "stream": False, "max_tokens": 32, **fields},
                          timeout=60)
            _save(out / "chat_nonstream.txt", r)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    for f in sorted((workdir / "logs").glob("*.log")):
        (out / "tabby_file.log").write_bytes(f.read_bytes())


def _workload(max_tokens: int) -> Workload:
    return Workload(max_tokens=max_tokens)


if __name__ == "__main__":
    a = sys.argv[1:]
    capture(Path(a[0]), a[1], a[2], *(a[3:5]))
