#!/usr/bin/env bash
# llama-cpp-python 0.3.36 for the benchmark's llama.cpp peer, into .bench/llama (git-ignored).
#
# Built from source for plain AVX2 + FMA + F16C, with AVX-512 and AMX off, so the same build runs on
# AVX2-only CPUs (this project's CI machine) and does not crash on CPUs that report AMX (a known
# ggml bug). The wheel is kept in .bench/wheels and reused: the build takes 5+ minutes on 2 cores.
# Only bench/ uses it, through PYTHONPATH in the llama.cpp peer's own process (bench/processes.py).
#
#   bash bench/build_llama.sh            # uses .venv/bin/pip
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}
WHEELS=.bench/wheels
TARGET=${STUDYGROUP_BENCH_LLAMA:-.bench/llama}
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PIP" wheel --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -w "$WHEELS"
fi
ls "$WHEELS"/diskcache-*.whl >/dev/null 2>&1 || "$PIP" download --no-deps diskcache==5.6.3 -d "$WHEELS"
# numpy, jinja2 and typing-extensions (its other dependencies) come from .venv itself.
"$PIP" install --quiet --no-deps --upgrade --target "$TARGET" "$WHEELS"/llama_cpp_python-0.3.36-*.whl "$WHEELS"/diskcache-*.whl
echo "llama-cpp-python installed in $TARGET"
