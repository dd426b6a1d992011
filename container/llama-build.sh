#!/usr/bin/env bash
# The one way this project builds llama-cpp-python: the dev venv (make), CI and both images
# (container/install.sh) all install it through this script, so the demo, the tests and the
# benchmark run the build that is deployed.
#
#   container/llama-build.sh --python PY [--variant cpu|cuda] [--dry-run]
#   container/llama-build.sh --print-key [--variant cpu|cuda]
#
# The build is portable, never for the build host: ggml's CPU backend is compiled once per x86
# microarchitecture (GGML_CPU_ALL_VARIANTS, as the llama.cpp DLC does) and loaded at run time
# (GGML_BACKEND_DL), so the best kernels the running CPU supports are used
# (decision_server/ggml_backends.py loads them).
#
# The wheel is cached under a key made of the version and the flags (DECISION_WHEEL_CACHE, by
# default ~/.cache/decision-router/llama-wheels): a second install takes seconds, and a venv never
# receives a wheel built with other flags. pip's own wheel cache is bypassed for this package:
# it keys wheels by version alone, so it would hand back a wheel compiled on another CPU.
set -euo pipefail

PYTHON=""
VARIANT=cpu
DRY_RUN=0
PRINT_KEY=0
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --python) PYTHON="$2"; shift 2 ;;
        --variant) VARIANT="$2"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --print-key) PRINT_KEY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "llama-build.sh: unknown argument $1" >&2; usage >&2; exit 64 ;;
    esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="$(sed -n 's/^llama-cpp-python==\([^[:space:];]*\).*/\1/p' "$ROOT/container/requirements.txt")"
[[ -n "$VERSION" ]] || { echo "llama-build.sh: no llama-cpp-python==VERSION pin in container/requirements.txt" >&2; exit 65; }

# Portable: no -march=native; every CPU variant built as a loadable module into the wheel's lib
# folder; the multimodal library (mtmd) is not used here and not built.
PORTABLE="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DIR:STRING=llama_cpp/lib -DLLAVA_BUILD=OFF"
case "$VARIANT" in
    cpu) CMAKE_ARGS_BUILD="$PORTABLE" ;;
    cuda) CMAKE_ARGS_BUILD="$PORTABLE -DGGML_CUDA=ON" ;;
    *) echo "llama-build.sh: --variant must be cpu or cuda (got $VARIANT)" >&2; exit 64 ;;
esac

KEY="$VERSION-$VARIANT-$(printf '%s\n%s\n' "$VERSION" "$CMAKE_ARGS_BUILD" | sha256sum | cut -c1-12)"
if [[ $PRINT_KEY -eq 1 ]]; then echo "$KEY"; exit 0; fi
[[ -n "$PYTHON" ]] || { echo "llama-build.sh: --python is required" >&2; usage >&2; exit 64; }

CACHE="${DECISION_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/decision-router/llama-wheels}"
WHEEL_DIR="$CACHE/$KEY"

run() {
    echo "+ $*"
    if [[ $DRY_RUN -eq 0 ]]; then "$@"; fi
}

wheel() { compgen -G "$WHEEL_DIR/llama_cpp_python-$VERSION-*.whl" | head -n1 || true; }

if [[ -n "$(wheel)" ]]; then
    echo "==> llama-cpp-python $VERSION, build $KEY: cached wheel in $WHEEL_DIR"
else
    echo "==> llama-cpp-python $VERSION, build $KEY: compiling (every CPU variant: about 7 minutes on 2 cores)"
    STAGING="$CACHE/.building-$KEY-$$"
    run mkdir -p "$STAGING"
    # --no-binary: never PyPI's prebuilt wheel; --no-cache-dir: never pip's cached one.
    run env CMAKE_ARGS="$CMAKE_ARGS_BUILD" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python \
        -w "$STAGING" "llama-cpp-python==$VERSION"
    if [[ $DRY_RUN -eq 0 ]]; then
        printf 'version %s\nvariant %s\nCMAKE_ARGS %s\nbuilt %s on %s\ncompiler %s\n' "$VERSION" "$VARIANT" \
            "$CMAKE_ARGS_BUILD" "$(date -u +%FT%TZ)" "$(uname -m)" "$(c++ --version | head -n1)" > "$STAGING/BUILD"
        rm -rf "$WHEEL_DIR"
        mv "$STAGING" "$WHEEL_DIR"  # a build that died half-way is never taken for a cached one
    fi
fi

# Whatever llama-cpp-python the environment had (a native build from an older checkout, say)
# goes first; the wheel then brings its dependencies from the index.
run "$PYTHON" -m pip uninstall --quiet --yes llama-cpp-python
WHEEL="$(wheel)"
if [[ -z "$WHEEL" ]]; then WHEEL="$WHEEL_DIR/llama_cpp_python-$VERSION-py3-none-linux_x86_64.whl"; fi  # dry run: to be built
run "$PYTHON" -m pip install --quiet "$WHEEL"
echo "==> installed llama-cpp-python $VERSION, build $KEY ($CMAKE_ARGS_BUILD)"
