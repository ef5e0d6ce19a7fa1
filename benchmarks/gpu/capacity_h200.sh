#!/usr/bin/env bash
# Issue 44 on a GPU machine with nothing but this repo and the carried folder (as benchmarks/gpu/llamacpp_h200.sh,
# whose steps 1-3 this repeats): build the CUDA llama-server in the background, synthesize the 3B-shaped MTP and
# DFlash models meanwhile, then run `bakeoff capacity` twice: spec off vs MTP n-max 3 (capacity-mtp.yaml, from
# benchmarks/gpu/capacity-h200.yaml) and target spec off vs DFlash n-max 7 (capacity-dflash.yaml), with the
# model paths the synthesizer gave here. Everything lands in $OUT: results.tgz (runs, yaml, logs) and
# capacity-*.txt (each search's console: every probe, then the boundary table and the paired verdict).
# Try it on a CPU: SMALL=1 GPU_LAYERS=0 BACKEND=cpu bash benchmarks/gpu/capacity_h200.sh (tiny models).
set -u
T0=$SECONDS
GPU=${GPU:-.gpu}
WORK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=120
export BAKEOFF_SDIST_DIR="$PWD/$GPU"
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
. benchmarks/gpu/gpu_tag.sh
left() { echo $((DEADLINE - (SECONDS - T0))); }
pack() {
  say "packing results into \$OUT"
  tar czf "$OUT/results.tgz" -C "$WORK" logs $(cd "$WORK" && ls -d runs yaml 2>/dev/null)
  cp "$WORK"/capacity-*.txt "$OUT/" 2>/dev/null
  ls -la "$OUT"
}

if [ -z "${SMALL:-}" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$GPU"/whl/*.whl || { say "wheel install failed"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv > "$WORK/logs/machine.txt" 2>&1
cat "$WORK/logs/machine.txt"

BACKEND=${BACKEND:-cuda}
say "starting: bakeoff engines install llamacpp --backend $BACKEND"
setsid bash -c "python3 -P -c 'from bakeoff.core.cli import main; main()' engines install llamacpp --backend $BACKEND \
  > '$WORK/logs/install.log' 2>&1; echo \$? > '$WORK/install.rc'" < /dev/null &

say "synthesizing models"
python3 benchmarks/gpu/make_spec_models.py --tokenizer "$GPU/smollm2_tokenizer.json.gz" --out "$WORK/yaml" \
  ${SMALL:+--small --reps 1 --passes 1 --max-tokens 32} --gpu-layers "${GPU_LAYERS:-99}" 2>&1 \
  | tee "$WORK/logs/models.log"
# the capacity files: this repo's template with the arms (and model paths) of the freshly written load.yaml
python3 - "$WORK/yaml" "${GPU_LAYERS:-99}" "$GPU_TAG" <<'PY'
import sys, yaml
out, layers, tag = sys.argv[1], sys.argv[2], sys.argv[3]
template = yaml.safe_load(open("benchmarks/gpu/capacity-h200.yaml"))
arms = {a["name"]: a for a in yaml.safe_load(open(f"{out}/load.yaml"))["arms"]}
for name, pair in (("mtp", ("mtp-off", "mtp-n3")), ("dflash", ("target-off", "dflash-n7"))):
    data = dict(template, name=f"{tag}-capacity-{name}", baseline=pair[0], arms=[arms[p] for p in pair])
    for arm in data["arms"]:
        arm["settings"]["gpu_layers"] = int(layers) if layers.isdigit() else layers
    open(f"{out}/capacity-{name}.yaml", "w").write(yaml.safe_dump(data, sort_keys=False))
    print(f"wrote {out}/capacity-{name}.yaml")
PY

while [ ! -e "$WORK/install.rc" ]; do
  [ "$(left)" -le 60 ] && { say "build still running"; tail -3 "$WORK/logs/install.log"; pack; exit 3; }
  sleep 5
done
say "install exit $(cat "$WORK/install.rc")"; tail -5 "$WORK/logs/install.log"
[ "$(cat "$WORK/install.rc")" = 0 ] || { pack; exit 1; }

for name in ${RUNS:-mtp dflash}; do
  [ "$(left)" -le 40 ] && { say "no time left for capacity-$name"; break; }
  say "bakeoff capacity capacity-$name.yaml"
  timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" capacity \
    "$WORK/yaml/capacity-$name.yaml" --out "$WORK/runs" > "$WORK/capacity-$name.txt" 2>&1
  say "exit $?"
  sed -n '/^Capacity at/,$p' "$WORK/capacity-$name.txt"
done
pack
say "done"
