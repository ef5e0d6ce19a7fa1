#!/usr/bin/env bash
# The ExLlamaV3/TabbyAPI run on the lent H200: install carried wheels, JIT-build exllamav3's CUDA
# extension, make and quantize a model, capture TabbyAPI's answers, run bakeoff, pack results into $OUT.
#
# Resumable: every stage leaves a marker under /root/bk, and the script stops itself before DEADLINE
# seconds, so calling it again on the still-warm machine carries on (the extension build runs on in its
# own session between calls). Carried paths (docs/exllama-h200.md says how to make them): .whl (wheels),
# .tabby/tabbyAPI (TabbyAPI source), .gpu/tokenizer.tgz, .gpu/cal_data.tgz (exllamav3's calibration
# texts), .gpu/bakeoff-0.1.0-py3-none-any.whl, optionally .gpu/ext/ (the extension a first call built).
# SKIP_CAPTURES=1 skips the raw captures (capture_tabby.py) and runs only the bakeoff.
set -u
T0=$SECONDS
DEADLINE=${DEADLINE:-550}
REPO=$PWD
BK=/root/bk
OUT=${OUT:-/tmp/out}
mkdir -p "$BK/models" "$BK/captures" "$BK/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$BK/bksite:$BK/site${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_EXTENSIONS_DIR="$BK/torch_ext" TORCH_CUDA_ARCH_LIST="9.0" MAX_JOBS=16
export BAKEOFF_TABBY_DIR="$REPO/.tabby/tabbyAPI" BAKEOFF_TABBY_PYTHON=python3
Q4="$BK/models/rand-llama-150m-exl3-4.0bpw"
Q2="$BK/models/rand-llama-150m-exl3-2.0bpw"
FP="$BK/models/rand-llama-150m"

left() { echo $((DEADLINE - (SECONDS - T0))); }
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected, in run names

pack() {
  say "packing results into \$OUT"
  cp "$BK"/*.log "$BK/logs/" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$BK" captures logs $(cd "$BK" && ls -d runs bakeoff.yaml report.txt 2>/dev/null)
  ls -la "$OUT"
}

# -- 1. wheels and the bakeoff snapshot ------------------------------------------------------------
if [ ! -e "$BK/site.ok" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$BK/site" .whl/*.whl \
    && python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$BK/bksite" .gpu/bakeoff-0.1.0-py3-none-any.whl \
    && touch "$BK/site.ok" || { say "install failed"; pack; exit 1; }
  # the PyPI wheel lacks the converter's calibration texts; they travel from exllamav3's source tree
  tar xzf .gpu/cal_data.tgz -C "$BK/site/exllamav3/conversion/standard_cal_data/"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > "$BK/logs/gpu.txt"
  python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda)" >> "$BK/logs/gpu.txt"
  nvcc --version | tail -2 >> "$BK/logs/gpu.txt"
  cat "$BK/logs/gpu.txt"
fi

# -- 2. exllamav3's extension: carried prebuilt, or a JIT build in its own session -----------------
if ls .gpu/ext/exllamav3_ext.so.gz.* >/dev/null 2>&1 && [ ! -e "$BK/ext.ok" ]; then
  mkdir -p "$BK/extpre" && cat .gpu/ext/exllamav3_ext.so.gz.* | gunzip > "$BK/extpre/exllamav3_ext.so" \
    && touch "$BK/ext.ok" "$BK/ext_sent" && say "using the carried prebuilt extension"
fi
export PYTHONPATH="$BK/extpre:$PYTHONPATH"
if [ ! -e "$BK/ext.ok" ] && ! { [ -e "$BK/compile.pid" ] && kill -0 "$(cat "$BK/compile.pid")" 2>/dev/null; }; then
  say "starting the exllamav3 extension build (MAX_JOBS=$MAX_JOBS, arch $TORCH_CUDA_ARCH_LIST)"
  setsid bash -c "python3 -c 'import exllamav3.ext as e; print(e.exllamav3_ext.__file__)' && touch '$BK/ext.ok'" \
    > "$BK/compile.log" 2>&1 < /dev/null &
  echo $! > "$BK/compile.pid"
fi

# -- 3. the model (CPU, while the extension builds) -----------------------------------------------
if [ ! -e "$FP/model.safetensors" ]; then
  mkdir -p "$BK/tokenizer" && tar xzf .gpu/tokenizer.tgz -C "$BK/tokenizer"
  python3 benchmarks/gpu/make_random_model.py "$BK/tokenizer" "$FP" 2>&1 | tee "$BK/logs/make_model.log"
fi

while [ ! -e "$BK/ext.ok" ]; do
  if ! kill -0 "$(cat "$BK/compile.pid")" 2>/dev/null; then
    say "extension build FAILED"; tail -40 "$BK/compile.log"; pack; exit 1
  fi
  if [ "$(left)" -le 0 ]; then
    say "extension still building: objects so far $(find "$TORCH_EXTENSIONS_DIR" -name '*.o' | wc -l). RESUME"
    pack; exit 3
  fi
  sleep 10
done
say "extension ready: $(find "$TORCH_EXTENSIONS_DIR" "$BK/extpre" -name 'exllamav3_ext*.so' 2>/dev/null | head -1)"
if [ ! -e "$BK/ext_sent" ]; then
  so=$(find "$TORCH_EXTENSIONS_DIR" -name 'exllamav3_ext*.so' | head -1)
  ls -la "$so"
  gzip -1 -c "$so" > "$BK/ext.so.gz"
  if [ "$(stat -c %s "$BK/ext.so.gz")" -le 50000000 ]; then
    (cd "$OUT" && split -b 15M -d "$BK/ext.so.gz" exllamav3_ext.so.gz.)
  else
    say "compressed extension is $(stat -c %s "$BK/ext.so.gz") bytes: too large to bring back"
  fi
  touch "$BK/ext_sent"
fi

# -- 4. quantize to EXL3 (4.0 bpw target, 2.0 bpw draft) -------------------------------------------
quant() {  # in out bits
  [ -e "$2/quantization_config.json" ] && return 0
  [ "$(left)" -gt 30 ] || return 1
  say "quantizing $(basename "$2")"
  timeout "$(left)" python3 benchmarks/gpu/quantize_exl3.py "$1" "$2" "$BK/work-$3" "$3" > "$BK/logs/quant-$3.log" 2>&1
  local rc=$?
  tail -5 "$BK/logs/quant-$3.log"
  return $rc
}
sed "s/^name: exllama .*/name: exllama-$GPU_TAG/" benchmarks/gpu/exllama-h200.yaml > "$BK/bakeoff.yaml"
if [ ! -e "$Q4/quantization_config.json" ] && [ "$(left)" -lt 150 ]; then say "RESUME before quantizing"; pack; exit 3; fi
if ! quant "$FP" "$Q4" 4.0; then
  say "EXL3 quantization failed: serving the unquantized safetensors model instead"
  sed -i "s|$Q4|$FP|g" "$BK/bakeoff.yaml"; Q4="$FP"
fi
if [ "$(left)" -gt 300 ] && quant "$FP" "$Q2" 2.0; then :; else
  say "no 2.0 bpw draft: dropping arm draft-2bpw"
  python3 - "$BK/bakeoff.yaml" <<'EOF'
import sys, yaml
p = sys.argv[1]; d = yaml.safe_load(open(p)); d["arms"] = [a for a in d["arms"] if a["name"] != "draft-2bpw"]
open(p, "w").write(yaml.safe_dump(d, sort_keys=False))
EOF
fi

# -- 5. captures (raw answers for the unit tests) ------------------------------------------------
for spec in ${SKIP_CAPTURES:+} "spec-off none" "ngram ngram" "draft-self draft $Q4"; do
  [ -n "${SKIP_CAPTURES:-}" ] && break
  set -- $spec
  [ -e "$BK/captures/$1/chat_nonstream.txt" ] && continue
  [ "$(left)" -lt 90 ] && { say "RESUME before capture $1"; pack; exit 3; }
  say "capture $1"
  timeout "$(left)" python3 benchmarks/gpu/capture_tabby.py "$BK/captures" "$1" "$Q4" "$2" ${3:-} 2>&1 \
    | tee -a "$BK/logs/captures.log"
done

# -- 6. the bakeoff itself ----------------------------------------------------------------------
if [ ! -e "$BK/bakeoff.ok" ]; then
  [ "$(left)" -lt 150 ] && { say "RESUME before the bakeoff"; pack; exit 3; }
  say "bakeoff run"
  rm -rf "$BK/runs"
  timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" run "$BK/bakeoff.yaml" --out "$BK/runs" \
    > "$BK/logs/bakeoff-run.log" 2>&1 && touch "$BK/bakeoff.ok"
  tail -30 "$BK/logs/bakeoff-run.log"
  run=$(ls -d "$BK"/runs/*/ | head -1)
  COLUMNS=200 python3 -P -c "from bakeoff.core.cli import main; main()" report "$run" > "$BK/report.txt" 2>&1
fi
pack
cat "$BK/report.txt" 2>/dev/null
say "done"
