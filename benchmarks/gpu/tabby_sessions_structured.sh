#!/usr/bin/env bash
# TabbyAPI agent sessions and structured outputs on the lent GPU (issue 41 item 8): the exllama adapter's
# prefix-cache and structured pieces against a real TabbyAPI. Same carried paths and the same /root/bk markers as
# benchmarks/gpu/exllama_h200.sh (wheels, TabbyAPI source, tokenizer, calibration texts, the bakeoff wheel,
# optionally the prebuilt extension in .gpu/ext/), so either script resumes what the other set up.
#
# Two bakeoffs, each spec-off against ngram on the random-weight SmolLM2-sized Llama (EXL3 4.0 bpw, or the
# unquantized model when quantizing fails):
#   sessions:   2 synthetic sessions x 4 turns (200-token tool results, 24-token replies), 2 passes; read each
#               turn's cached_tokens (TabbyAPI's Metrics line) and the cache-miss / cache-unreported flags.
#   structured: json_schema and tool_call prompts at 1 and 4 streams; tool calls need model.tool_format in
#               config.yml (TOOL_FORMAT, default qwen3_coder: random weights write no tool call, so expect
#               invalid answers there; what is checked is that TabbyAPI takes the requests and the grammar).
# Resumable: stops itself before DEADLINE seconds; call again on the warm machine to carry on.
set -u
T0=$SECONDS
DEADLINE=${DEADLINE:-550}
REPO=$PWD
BK=/root/bk
OUT=${OUT:-/tmp/out}
TOOL_FORMAT=${TOOL_FORMAT:-qwen3_coder}
mkdir -p "$BK/models" "$BK/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$BK/bksite:$BK/site${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_EXTENSIONS_DIR="$BK/torch_ext" TORCH_CUDA_ARCH_LIST="9.0" MAX_JOBS=16
export BAKEOFF_TABBY_DIR="$REPO/.tabby/tabbyAPI" BAKEOFF_TABBY_PYTHON=python3
Q4="$BK/models/rand-llama-150m-exl3-4.0bpw"
FP="$BK/models/rand-llama-150m"

left() { echo $((DEADLINE - (SECONDS - T0))); }
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
bakeoff() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected, in run names

pack() {
  say "packing results into \$OUT"
  tar czf "$OUT/tabby-sessions-structured.tgz" -C "$BK" logs \
    $(cd "$BK" && ls -d runs-sessions runs-structured sessions.yaml structured.yaml report-*.txt 2>/dev/null)
  ls -la "$OUT"
}

# -- 1. wheels and the bakeoff snapshot (as exllama_h200.sh) ----------------------------------------
if [ ! -e "$BK/site.ok" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$BK/site" .whl/*.whl \
    && python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$BK/bksite" .gpu/bakeoff-0.1.0-py3-none-any.whl \
    && touch "$BK/site.ok" || { say "install failed"; pack; exit 1; }
  tar xzf .gpu/cal_data.tgz -C "$BK/site/exllamav3/conversion/standard_cal_data/"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$BK/logs/gpu.txt"
fi

# -- 2. exllamav3's extension: carried prebuilt, or a JIT build in its own session -----------------
if ls .gpu/ext/exllamav3_ext.so.gz.* >/dev/null 2>&1 && [ ! -e "$BK/ext.ok" ]; then
  mkdir -p "$BK/extpre" && cat .gpu/ext/exllamav3_ext.so.gz.* | gunzip > "$BK/extpre/exllamav3_ext.so" \
    && touch "$BK/ext.ok" && say "using the carried prebuilt extension"
fi
export PYTHONPATH="$BK/extpre:$PYTHONPATH"
if [ ! -e "$BK/ext.ok" ] && ! { [ -e "$BK/compile.pid" ] && kill -0 "$(cat "$BK/compile.pid")" 2>/dev/null; }; then
  say "starting the exllamav3 extension build"
  setsid bash -c "python3 -c 'import exllamav3.ext as e; print(e.exllamav3_ext.__file__)' && touch '$BK/ext.ok'" \
    > "$BK/compile.log" 2>&1 < /dev/null &
  echo $! > "$BK/compile.pid"
fi

# -- 3. the model, quantized once ---------------------------------------------------------------
if [ ! -e "$FP/model.safetensors" ]; then
  mkdir -p "$BK/tokenizer" && tar xzf .gpu/tokenizer.tgz -C "$BK/tokenizer"
  python3 benchmarks/gpu/make_random_model.py "$BK/tokenizer" "$FP" > "$BK/logs/make_model.log" 2>&1
fi
while [ ! -e "$BK/ext.ok" ]; do
  kill -0 "$(cat "$BK/compile.pid")" 2>/dev/null || { say "extension build FAILED"; tail -40 "$BK/compile.log"; pack; exit 1; }
  [ "$(left)" -le 0 ] && { say "extension still building. RESUME"; pack; exit 3; }
  sleep 10
done
MODEL="$Q4"
if [ ! -e "$Q4/quantization_config.json" ]; then
  [ "$(left)" -lt 150 ] && { say "RESUME before quantizing"; pack; exit 3; }
  say "quantizing to 4.0 bpw"
  timeout "$(left)" python3 benchmarks/gpu/quantize_exl3.py "$FP" "$Q4" "$BK/work-4.0" 4.0 > "$BK/logs/quant-4.0.log" 2>&1 \
    || { say "EXL3 quantization failed: serving the unquantized model"; MODEL="$FP"; }
fi

# -- 4. the two bakeoff files -------------------------------------------------------------------
arms() {  # the two arms; $1: extra options line (indented) for both, $2: parallel slots
  cat <<EOF
arms:
  - name: spec-off
    engine: exllama
    model: $MODEL
    settings: {ctx: 4096, parallel: $2}
$1
  - name: ngram
    engine: exllama
    model: $MODEL
    settings: {ctx: 4096, parallel: $2}
    speculative: {method: ngram, n_max: 4}
$1
baseline: spec-off
EOF
}
{ echo "name: tabby-sessions-$GPU_TAG"; arms "" 1; cat <<EOF
workload:
  sessions:
    synthetic: {sessions: 2, turns: 4, tool_result_tokens: 200, reply_tokens: 24, seed: 1}
  max_tokens: 24
  reps: 1
  passes: 2
  warmup: 1
  gates: []
EOF
} > "$BK/sessions.yaml"
{ echo "name: tabby-structured-$GPU_TAG"; arms "    options: {config: {model: {tool_format: $TOOL_FORMAT}}}" 4; cat <<EOF
workload:
  prompts: [code_python]
  structured: {kinds: [json_schema, tool_call]}
  concurrency: [1, 4]
  max_tokens: 128
  reps: 1
  passes: 2
  warmup: 1
  gates: []
EOF
} > "$BK/structured.yaml"

# -- 5. the runs ------------------------------------------------------------------------------
for kind in sessions structured; do
  [ -e "$BK/$kind.ok" ] && continue
  [ "$(left)" -lt 120 ] && { say "RESUME before the $kind run"; pack; exit 3; }
  say "bakeoff check + run: $kind"
  bakeoff check "$BK/$kind.yaml" > "$BK/logs/check-$kind.log" 2>&1; tail -5 "$BK/logs/check-$kind.log"
  rm -rf "$BK/runs-$kind"
  timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" run "$BK/$kind.yaml" \
    --out "$BK/runs-$kind" > "$BK/logs/run-$kind.log" 2>&1 && touch "$BK/$kind.ok"
  tail -30 "$BK/logs/run-$kind.log"
  run=$(ls -d "$BK/runs-$kind"/*/ 2>/dev/null | head -1)
  [ -n "$run" ] && COLUMNS=200 bakeoff report "$run" --tables > "$BK/report-$kind.txt" 2>&1
  # every sample's cache and structured figures, for the note: cached_tokens per turn, flags, validity
  [ -n "$run" ] && python3 - "$run" > "$BK/logs/samples-$kind.txt" <<'EOF'
import json, sys
from pathlib import Path
for line in (Path(sys.argv[1]) / "samples.jsonl").read_text().splitlines():
    s = json.loads(line)
    print(s["arm"], s.get("session"), s.get("turn"), s.get("structured"), s.get("prompt_tokens"),
          s.get("cached_tokens"), s.get("decode_tps"), ";".join(f.split(":")[0] for f in s.get("flags", [])))
EOF
done
pack
cat "$BK"/report-*.txt 2>/dev/null
say "done"
