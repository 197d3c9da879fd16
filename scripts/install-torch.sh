#!/bin/sh
# Install torch into the virtual environment without ever pulling the
# multi-gigabyte CUDA build onto a machine that has no GPU.
#   usage: install-torch.sh PYTHON VERSION
# GPU present (nvidia-smi lists one): the PyPI build, which carries CUDA.
# No GPU: the CPU build, `torch==VERSION+cpu`, from wherever pip finds it
# first (a wheel on disk through pip's find-links, or a configured index);
# otherwise from the PyTorch CPU index, with the other packages from PyPI.
set -eu
py=$1
version=$2
if "$py" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$version' else 1)" 2>/dev/null; then
  echo "torch $version already installed"
  exit 0
fi
# pip shows its progress: the packages it collects, a bar per download on a
# terminal (a line per finished download in a log), and what it installs.
pip_install() {
  "$py" -m pip install --progress-bar on "$@"
}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPU found: installing torch==$version from PyPI (the CUDA build with its nvidia-* packages: several GB to download)"
  pip_install "torch==$version"
  exit 0
fi
echo "no GPU: installing the CPU build of torch==$version (about 200 MB to download, about 700 MB unpacked)"
if pip_install "torch==$version+cpu"; then
  exit 0
fi
echo "torch==$version+cpu is not on the configured index: trying the PyTorch CPU index (https://download.pytorch.org/whl/cpu)"
pip_install "torch==$version" \
  --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
