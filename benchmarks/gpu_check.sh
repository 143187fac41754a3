#!/usr/bin/env bash
# GPU check of the replay path (issue 8): a random-init Qwen3 (Qwen3-0.6B shape, vocabulary
# 151,936) replays a 32,768-token synthetic log on one GPU; prints tokens/s, peak GPU memory
# and the ratio to a plain forward pass. Nothing is downloaded.
#
#   benchmarks/gpu_check.sh                 # on a CUDA machine (a few minutes; stops at 8)
#   benchmarks/gpu_check.sh --smoke         # tiny model on CPU: checks the script only
#   benchmarks/gpu_check.sh --device cpu    # the full-size check on CPU (slow: 10+ minutes)
#   benchmarks/gpu_check.sh --json out.json # also write the figures as JSON
#
# Needs the package importable (pip install -e . from the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if [[ " $* " != *" --smoke "* && " $* " != *" --device cpu "* ]]; then
  if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device visible to torch; run with --smoke for the CPU check" >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || true
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
fi
if [[ " $* " == *" --smoke "* || " $* " == *" --device cpu "* ]]; then
  exec python benchmarks/gpu_check.py "$@"
fi
# On a GPU the check fits 8 minutes by construction (sizes and budget: gpu_check.py FULL);
# the guard (440 s, then 15 s to stop, after the checks above) makes that a limit; the
# figures print as each part finishes, so a stop keeps those already measured.
exec timeout --signal=INT --kill-after=15 440 python benchmarks/gpu_check.py "$@"
