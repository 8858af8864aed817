#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one go: `make test-gpu`, then the generation and the TRL
# benchmarks on CUDA with random-init models of SmolLM2-135M's shapes (`smollm2-shape-random`).
# Logs go to the folder given (default gpu-out/). PY picks the interpreter (default .venv/bin/python;
# on a machine whose own python holds torch and the deps: PY=python3 bash benchmarks/gpu.sh DIR).
# Further arguments pick steps (test-gpu, generate, vs_trl; default all), for leases that cap a command's time:
#   bash benchmarks/gpu.sh gpu-out/ test-gpu generate     then     bash benchmarks/gpu.sh gpu-out/ vs_trl
set -u
out=${1:-gpu-out}
shift $(( $# > 0 ? 1 : 0 ))
steps=" ${*:-test-gpu generate vs_trl} "
for s in $steps; do
    case $s in test-gpu|generate|vs_trl) ;; *) echo "gpu.sh: unknown step '$s' (expected test-gpu, generate or vs_trl)" >&2; exit 2;; esac
done
want() { [[ $steps == *" $1 "* ]]; }
PY=${PY:-.venv/bin/python}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS CMD...: run with a time limit, log to $out/NAME.log, never stop the suite
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   rc $? in $((SECONDS - t0)) s"
    grep -v -i "warn" "$out/$name.log" | tail -n 12
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
want test-gpu && step test-gpu 300 make test-gpu PY="$PY" -o .venv/.installed
want generate && for dtype in bf16 fp32; do
    step "generate-$dtype" 240 "$PY" benchmarks/generate.py --model smollm2-shape-random --device cuda \
        --dtype "$dtype" --seqs 256 --new-tokens 128 --repeats 2
done
want vs_trl && step vs_trl 480 "$PY" benchmarks/vs_trl.py --model smollm2-shape-random --device cuda --minutes 1 \
    --eval-every 1000 --eval-prompts 16 --eval-samples 2 --max-new-tokens 32 --set rollout.length.type=none \
    --set filter.zero_variance=false   # a random model never passes: every group would be filtered
