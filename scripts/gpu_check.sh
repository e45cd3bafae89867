#!/usr/bin/env bash
# The GPU measurements of the compile switch and the CUDA path, in one go (about 8 minutes on one H100 or
# H200): update steps eager against compiled (CUDA graphs), Hopper-v5 PPO on the machine's CPU cores against
# the GPU, Hopper-v5 SAC eager against compiled, and the CUDA tests. Run from the repository root with rlcli
# installed; RESULTS (default gpu_check_results) receives the JSON and logs. Every section has its own time limit and goes on after a
# failure, printing what failed.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-gpu_check_results}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
section() { echo; echo "== $1"; }

section "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

for case in sac-hopper ppo-pong ppo-hopper; do
  section "update step: $case, eager against compiled"
  timeout 120 python3 scripts/bench_update.py --case "$case" --device cuda --json "$RESULTS/update-$case.json" \
    2>"$RESULTS/update-$case.err" || { echo "FAILED ($?)"; tail -5 "$RESULTS/update-$case.err"; }
done

section "Hopper-v5 PPO, 100k steps (gymnasium's MuJoCo): CPU cores, GPU eager, GPU compiled"
for variant in "cpu --no-compile" "cuda --no-compile" "cuda --compile"; do
  set -- $variant
  timeout 100 python3 -m rlcli train Hopper-v5 --backend gymnasium --steps 100000 --eval-every 0 --eval-episodes 2 \
    --device "$1" "$2" --run-dir "$RESULTS/hopper-$1$2" >"$RESULTS/hopper-$1$2.log" 2>&1 \
    && echo "$1 $2: $(grep -o '[0-9,]* steps/s, [0-9.]* s' "$RESULTS/hopper-$1$2.log" | tail -1)" \
    || { echo "$1 $2 FAILED"; tail -5 "$RESULTS/hopper-$1$2.log"; }
done

section "Hopper-v5 SAC, 7k steps with learning_starts 2,000 (5k gradient steps): GPU eager, GPU compiled"
for variant in --no-compile --compile; do
  timeout 100 python3 -m rlcli train Hopper-v5 --algo sac --backend gymnasium --steps 7000 -p learning_starts=2000 \
    --eval-every 0 --eval-episodes 2 --device cuda "$variant" --run-dir "$RESULTS/sac-hopper$variant" \
    >"$RESULTS/sac-hopper$variant.log" 2>&1 \
    && echo "$variant: $(grep -o '[0-9,]* steps/s, [0-9.]* s' "$RESULTS/sac-hopper$variant.log" | tail -1)" \
    || { echo "$variant FAILED"; tail -5 "$RESULTS/sac-hopper$variant.log"; }
done

section "CUDA tests"
timeout 170 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -15
