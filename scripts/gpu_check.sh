#!/usr/bin/env bash
# CUDA graph checks on the GPU machine, from the repository root (python3 with torch + CUDA):
# graph replay vs eager tests, then the per-stage timing table (eager vs CUDA graphs).
set -uo pipefail
export PYTHONPATH=.
python3 - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device'}")
PY
python3 -m pytest -q -rs -p no:cacheprovider test/test_engine_cuda_graphs.py \
    test/test_backends_cuda_graphs.py test/test_engine_capture_safe.py test/test_model_cuda.py
tests=$?
timeout 200 python3 scripts/cuda_graph_timing.py --layers 4 --windows 20 --warmup 3
timing=$?
echo "tests exit ${tests}, timing exit ${timing}"
exit $(( tests != 0 || timing != 0 ))
