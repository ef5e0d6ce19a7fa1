#!/usr/bin/env bash
# GuideLLM and AIPerf beside bakeoff on the harness benchmark's stream source, on a quiet machine, in one device
# call (no network there). Each peer is installed from carried wheels into a --target folder of its own, never
# into bakeoff's: benchmarks/harness.py --peers runs a tool with only its own folder on PYTHONPATH.
#
# Four harness runs at once, each on 4 cores of its own (source, clients and the tool share them): GuideLLM at 1
# and at 5 tokens an event (RUN_A, RUN_B), AIPerf likewise (RUN_C, RUN_D), each the whole sweep (100 … 50k tok/s)
# with the raw-socket client and bakeoff's path at every point, so each table checks its own source. Everything
# lands in $OUT: harness-{a,b,c,d}.txt (each run's table), results.tgz (logs, machine.txt, each tool's own
# result files and consoles). Then, with the time left, bakeoff alone at 5k-50k tok/s and 200 outlier requests,
# twice side by side: its events stamped by the kernel's receive time (RUN e) and by the reader's clock (RUN f,
# `--clock user`, as before kernel stamps): harness-e.txt, harness-f.txt.
#
# Carried folder (KIT=.peers, git-ignored, ~37 MiB): wheels for CPython 3.12 manylinux (`pip download --no-deps
# --only-binary=:all: --python-version 3.12 ...`, the device tool's README), what the image lacks or has too old:
#   bakeoff/   a bakeoff wheel (the fallback if building the checkout fails) and openai, jiter, gguf, stevedore,
#              tenacity, httpx2, httpcore2, truststore, sniffio
#   common/    wheels both peers need at the same version (pydantic, pydantic-settings, datasets, typer, ...)
#   guidellm/  guidellm 0.8.1 and the rest of its tree; its torch, transformers, tokenizers, numpy, pandas and
#              pyarrow are the image's
#   aiperf/    aiperf 0.13.0 likewise; its transformers, tokenizers, scipy, pillow, pyarrow are the image's (its
#              plotting, Kubernetes and dashboard dependencies are left out: `aiperf profile` does not import them)
# The call (timeout 540 s, carry [".peers"]):
#   bash benchmarks/gpu/harness_peers_device.sh 2>&1 | tee $OUT/console.txt
# Rehearse on a CPU box with venvs (DIR/guidellm, DIR/aiperf) instead of wheels:
#   NO_WHEELS=1 PY=$PWD/.venv/bin/python PEER_VENV=/work/wt/peers-venvs RATES=167,20000 DEADLINE=300 WORK=/tmp/bkp \
#     RUN_A=0 RUN_B=1 RUN_C=0 RUN_D=1 bash benchmarks/gpu/harness_peers_device.sh
set -u
T0=$SECONDS
KIT=${KIT:-.peers}
WORK=${WORK:-/root/bkp}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-520}
PY=${PY:-python3}
RATES=${RATES:-100,167,500,1000,2000,5000,10000,20000,50000}
PEER_TIMEOUT=${PEER_TIMEOUT:-120}
# a run set to "off" is skipped
RUN_A=${RUN_A:-0-3} RUN_B=${RUN_B:-4-7} RUN_C=${RUN_C:-8-11} RUN_D=${RUN_D:-12-15}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_DISABLE_TELEMETRY=1
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
pack() {
  say "packing results into \$OUT"
  for r in a b c d e f; do cp "$WORK/logs/harness-$r.log" "$OUT/harness-$r.txt" 2>/dev/null; done
  tar czf "$OUT/results.tgz" -C "$WORK" logs $(cd "$WORK" && ls -d tmp-? 2>/dev/null)
  ls -la "$OUT"
}

# -- 1. bakeoff and each peer, each into its own folder ---------------------------------------------------------
if [ -z "${NO_WHEELS:-}" ]; then
  PEER_VENV="$WORK/peers"
  inst() { $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
  say "installing bakeoff (from the checkout, else the carried wheel) and each peer into its own folder"
  { inst "$WORK/site" "$KIT"/common/*.whl $(ls "$KIT"/bakeoff/*.whl | grep -v '/bakeoff-') \
      && { inst "$WORK/site" --no-build-isolation . 2>/dev/null || inst "$WORK/site" "$KIT"/bakeoff/bakeoff-*.whl; }; } &
  inst "$PEER_VENV/guidellm" "$KIT"/common/*.whl "$KIT"/guidellm/*.whl &
  inst "$PEER_VENV/aiperf" "$KIT"/common/*.whl "$KIT"/aiperf/*.whl &
  wait
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
PEER_VENV=${PEER_VENV:?set PEER_VENV to a folder holding guidellm/ and aiperf/}
{ date -u; uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; uptime; $PY --version
  $PY -P -c "import bakeoff.core, httpx; print('bakeoff from', bakeoff.core.__file__)"
  for t in guidellm aiperf; do
    if [ -x "$PEER_VENV/$t/bin/python" ]; then "$PEER_VENV/$t/bin/python" -m pip show $t 2>/dev/null | head -2
    else PYTHONPATH="$PEER_VENV/$t" $PY -c "import importlib.metadata as m; print('$t', m.version('$t'))"; fi
  done
  $PY -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|tokenizers|pyarrow|pandas|numpy|scipy|uvloop|aiohttp) '
} > "$WORK/logs/machine.txt" 2>&1
cat "$WORK/logs/machine.txt"
say "installed; $(left) s left"

# -- 2. four harness runs on disjoint cores: one tool and one event size each -----------------------------------
run() {  # name cores tool per-event
  mkdir -p "$WORK/tmp-$1"
  say "run $1: $3 at $4 token(s)/event on cores $2"
  TMPDIR="$WORK/tmp-$1" timeout "$(( $(left) - 20 ))" taskset -c "$2" $PY -P benchmarks/harness.py --rates "$RATES" \
    --per-event "$4" --outlier 0 --peers "$3" --peer-venv "$PEER_VENV" --peer-timeout "$PEER_TIMEOUT" \
    > "$WORK/logs/harness-$1.log" 2>&1
  say "run $1 exit $?"
}
[ "$RUN_A" != off ] && run a "$RUN_A" guidellm 1 &
[ "$RUN_B" != off ] && run b "$RUN_B" guidellm 5 &
[ "$RUN_C" != off ] && run c "$RUN_C" aiperf 1 &
[ "$RUN_D" != off ] && run d "$RUN_D" aiperf 5 &
wait
# -- 3. bakeoff alone at the fast paces, kernel receive stamps against the reader's clock, side by side -----------
clock() {  # name cores clock
  say "run $1: bakeoff alone, --clock $3, on cores $2"
  TMPDIR="$WORK/tmp-$1" timeout "$(( $(left) - 10 ))" taskset -c "$2" $PY -P benchmarks/harness.py \
    --rates 5000,10000,20000,50000 --per-event 1,5 --outlier 200 --clock "$3" > "$WORK/logs/harness-$1.log" 2>&1
  say "run $1 exit $?"
}
if [ "$(left)" -gt 90 ]; then mkdir -p "$WORK/tmp-e" "$WORK/tmp-f"; clock e 0-3 kernel & clock f 4-7 user & wait; fi
uptime
for r in a b c d e f; do [ -f "$WORK/logs/harness-$r.log" ] && { echo "== run $r"; cat "$WORK/logs/harness-$r.log"; }; done
pack
say "done"
