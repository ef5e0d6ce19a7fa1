# Sourced by the GPU scripts: GPU_TAG, the first GPU's name as nvidia-smi reports it, made a file-name word
# ("NVIDIA H100 80GB HBM3" -> h100-80gb-hbm3), or "cpu" without one. Run names, bundles and labels use it, so
# what a script writes says the card it ran on, not the card it was first written for (the lent machine may be
# an H100 or an H200). GPU_TAG set by the caller wins.
if [ -z "${GPU_TAG:-}" ]; then
  GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' \
    | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
  GPU_TAG=${GPU_TAG:-cpu}
fi
export GPU_TAG
