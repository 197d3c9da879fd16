#!/bin/sh
# Every CUDA path of the project in one command (docs/gpu-check.md):
#   scripts/gpu-check.sh --out DIR                  on a GPU machine (`--device cuda`, the default)
#   scripts/gpu-check.sh --device cpu --out DIR     the same steps at toy sizes, here
# Runs from the repository root with the project's venv when there is one,
# else the machine's python3 ($PYTHON to choose another). Nothing comes from
# the network: the package goes in through PYTHONPATH=src, and the few
# packages a GPU image lacks from the wheels scripts/gpu-check-prepare.sh put
# in .gpu-check/wheels. Other arguments: `scripts/gpu-check.sh --help`.
set -eu
# Relative --out, --work and --prepared are the caller's: read from here, not the root.
GPU_CHECK_CWD="$PWD"
export GPU_CHECK_CWD
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
if ! "$PYTHON" -c "import jsonschema" 2>/dev/null; then
  if ! ls .gpu-check/wheels/*.whl >/dev/null 2>&1; then
    echo "gpu-check: $PYTHON lacks jsonschema and .gpu-check/wheels holds no wheel:" \
      "run scripts/gpu-check-prepare.sh on a machine with the package index first" >&2
    exit 2
  fi
  site=$(mktemp -d)
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" .gpu-check/wheels/*.whl
  PYTHONPATH="$PYTHONPATH:$site"
fi
exec "$PYTHON" scripts/gpu_check "$@"
