#!/usr/bin/env bash
# The GPU measurements of the compile switch, the CUDA path and the device-resident simulators, in one go (the
# sections before playground about 10 minutes on one H100 or H200; the simulators' two, 400 s limits each, have
# not been run on a GPU yet): each algorithm's update step eager against compiled (CUDA graphs),
# the CUDA tests, Hopper-v5 PPO on the machine's CPU cores against the GPU, Hopper-v5 SAC eager against compiled,
# PPO on the torch backend's CartPole with its envs on the GPU against the CPU, SAC on the torch backend's
# Pendulum with its envs and replay on the GPU, and PPO end to end on MuJoCo Playground's Go1 (MJX on the GPU,
# 8,192 envs) and on MJLab's Go1 velocity task (MuJoCo Warp on the GPU, 4,096 envs). Run from the repository root
# with rlcli installed; the last two need pip install "rlcli[playground]" "jax[cuda12]" and "rlcli[mjlab]" (which
# pins torch through torchvision: check that torch still sees the GPU), and a section whose package is missing
# says so. Their closing evaluation runs on the CPU. ONLY picks sections (default: "update tests hopper-ppo
# hopper-sac torch-backend torch-sac playground mjlab"; "mjlab-learn", 20 minutes of MJLab's Go1 printing its
# training returns, runs only when named); RESULTS (default gpu_check_results) receives the JSON and logs. Every
# step has its own time limit and the script goes on after a failure, printing what failed.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-gpu_check_results}
ONLY=${ONLY:-update tests hopper-ppo hopper-sac torch-backend torch-sac playground mjlab}
DEVICE=${DEVICE:-cuda}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
section() { echo; echo "== $1 ($(date +%T))"; }
wanted() { [[ " $ONLY " == *" $1 "* ]]; }
rate() { grep -o '[0-9,]* steps/s, [0-9.]* s' "$1" | tail -1; }

section "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"

if wanted update; then
  for case in sac-hopper td3-hopper dqn-cartpole ppo-hopper ppo-pong; do
    section "update step: $case, eager against compiled"
    timeout 100 python3 scripts/bench_update.py --case "$case" --device "$DEVICE" --json "$RESULTS/update-$case.json" \
      2>"$RESULTS/update-$case.err" || { echo "FAILED ($?)"; tail -5 "$RESULTS/update-$case.err"; }
  done
fi

if wanted tests; then
  section "CUDA tests"
  timeout 280 python3 -m pytest -q -n 8 --maxprocesses 8 -p no:cacheprovider --durations 12 tests/test_cuda.py 2>&1 \
    | grep -v -i "warn" | tail -40
fi

if wanted hopper-ppo; then
  section "Hopper-v5 PPO, 100k steps (gymnasium's MuJoCo): GPU compiled, GPU eager, CPU cores"
  for variant in "$DEVICE --compile" "$DEVICE --no-compile" "cpu --no-compile"; do
    set -- $variant
    log="$RESULTS/hopper-$1$2.log"
    timeout 100 python3 -m rlcli train Hopper-v5 --backend gymnasium --steps 100000 --eval-every 0 --eval-episodes 2 \
      --device "$1" "$2" --run-dir "$RESULTS/hopper-$1$2" >"$log" 2>&1 \
      && echo "$1 $2: $(rate "$log")" || { echo "$1 $2 FAILED"; tail -5 "$log"; }
  done
fi

if wanted hopper-sac; then
  section "Hopper-v5 SAC, 7k steps with learning_starts 2,000 (5k gradient steps): GPU eager, GPU compiled"
  for variant in --no-compile --compile; do
    log="$RESULTS/sac-hopper$variant.log"
    timeout 100 python3 -m rlcli train Hopper-v5 --algo sac --backend gymnasium --steps 7000 -p learning_starts=2000 \
      --eval-every 0 --eval-episodes 2 --device "$DEVICE" "$variant" --run-dir "$RESULTS/sac-hopper$variant" \
      >"$log" 2>&1 && echo "$variant: $(rate "$log")" || { echo "$variant FAILED"; tail -5 "$log"; }
  done
fi

if wanted torch-backend; then
  section "CartPole-v1 PPO on the torch backend, 4,096 envs x 16 steps, 2M steps: GPU-resident against the CPU"
  for variant in "$DEVICE --compile" "$DEVICE --no-compile" "cpu --no-compile"; do
    set -- $variant
    log="$RESULTS/torch-cartpole-$1$2.log"
    timeout 150 python3 -m rlcli train CartPole-v1 --backend torch --steps 2000000 -p n_envs=4096 -p n_steps=16 \
      -p minibatch_size=16384 --eval-every 0 --eval-episodes 2 --device "$1" "$2" \
      --run-dir "$RESULTS/torch-cartpole-$1$2" >"$log" 2>&1 \
      && echo "$1 $2: $(rate "$log")" || { echo "$1 $2 FAILED"; tail -5 "$log"; }
  done
fi

if wanted torch-sac; then
  section "Pendulum-v1 SAC on the torch backend, 1,024 envs, batches of 8,192, 2 gradient steps a vector step, 1M steps"
  for variant in --compile --no-compile; do
    log="$RESULTS/torch-sac$variant.log"
    timeout 150 python3 -m rlcli train Pendulum-v1 --algo sac --backend torch --steps 1000000 -p n_envs=1024 \
      -p batch_size=8192 -p utd_ratio=0.002 -p learning_starts=20000 --eval-every 0 --eval-episodes 2 \
      --device "$DEVICE" "$variant" --run-dir "$RESULTS/torch-sac$variant" >"$log" 2>&1 \
      && echo "$variant: $(rate "$log")" || { echo "$variant FAILED"; tail -5 "$log"; }
  done
fi

if wanted playground; then
  section "Go1JoystickFlatTerrain PPO on MuJoCo Playground (MJX on the GPU), 8,192 envs x 24 steps, 5M steps"
  if python3 -c "import mujoco_playground, jax; jax.devices('$DEVICE')" 2>/dev/null; then
    log="$RESULTS/playground-go1.log"
    timeout 400 python3 -m rlcli train Go1JoystickFlatTerrain --backend playground --device "$DEVICE" \
      --steps 5000000 -p n_envs=8192 -p minibatch_size=49152 --eval-every 0 --eval-episodes 2 \
      --run-dir "$RESULTS/playground-go1" >"$log" 2>&1 \
      && echo "$(rate "$log") (JAX's compile included)" || { echo "FAILED"; tail -5 "$log"; }
  else
    echo "SKIPPED: no MuJoCo Playground, or no JAX for $DEVICE: pip install 'rlcli[playground]' 'jax[cuda12]'"
  fi
fi

if wanted mjlab; then
  section "Mjlab-Velocity-Flat-Unitree-Go1 PPO (MuJoCo Warp on the GPU), the entry's 4,096 envs x 24 steps, 10M steps"
  if python3 -c "import mjlab" 2>/dev/null; then
    log="$RESULTS/mjlab-go1.log"
    timeout 400 python3 -m rlcli train Mjlab-Velocity-Flat-Unitree-Go1 --device "$DEVICE" --steps 10000000 \
      --eval-every 0 --eval-episodes 2 --run-dir "$RESULTS/mjlab-go1" >"$log" 2>&1 \
      && echo "$(rate "$log") (Warp's compile included)" || { echo "FAILED"; tail -5 "$log"; }
  else
    echo "SKIPPED: pip install 'rlcli[mjlab]'"
  fi
fi

if wanted mjlab-learn; then
  section "Mjlab-Velocity-Flat-Unitree-Go1 PPO, the entry's 4,096 envs, 20 minutes: its training returns"
  if python3 -c "import mjlab" 2>/dev/null; then
    log="$RESULTS/mjlab-go1-learn.log"
    # no evaluations: they would run on the CPU's Warp; a line every 30M steps gives the training episodes' return
    timeout 1200 python3 -m rlcli train Mjlab-Velocity-Flat-Unitree-Go1 --device "$DEVICE" --steps 300000000 \
      --eval-every 0 --run-dir "$RESULTS/mjlab-go1-learn" >"$log" 2>&1
    echo "exit $? (124: the 20 minutes ran out; SIGTERM saved a checkpoint)"
    grep '^step ' "$log" | tail -30
  else
    echo "SKIPPED: pip install 'rlcli[mjlab]'"
  fi
fi
