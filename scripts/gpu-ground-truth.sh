#!/usr/bin/env bash
# GPU ground truth in one call, for a machine with an NVIDIA GPU and the python3 that has CUDA torch, triton and
# matplotlib (no venv, no network; the project's CPU pins do not apply there). Sized to fit a 10-minute slot:
#   1. every measured experiment with a CUDA path, on the GPU, stored in results/<gpu>/ (make gpu-results);
#   2. the FlashAttention kernel's correctness tests compiled on the GPU (all dtypes, the awkward shapes);
#   3. flash-attention-bench (ours vs SDPA flash and efficient, fwd and fwd+bwd, bf16, N 1k-16k, d 64 and 128,
#      causal and not) is part of 1.
# Then commit results/ ("GPU results: <gpu>, <date>") and let the pages show GPU beside CPU.
# With OUT set (the workplace's device tool), the logs and results are copied there.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 NO_MKDOCS_2_WARNING=1
out="${OUT:-/tmp/distlab-gpu}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
timeout 420 python3 -m distlab run --all --device cuda --store --no-cache 2>&1 | tee "$out/gpu-results.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/attention/test_flash_attention.py -k cuda 2>&1 \
  | tee "$out/kernel-tests.log"
tar -czf "$out/results.tar.gz" results 2>/dev/null || true
tail -n 20 "$out/gpu-results.log"
