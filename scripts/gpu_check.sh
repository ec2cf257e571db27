#!/usr/bin/env bash
# edgefd on one GPU machine in under ten minutes, with no network: installs edgefd from this tree
# with its CUDA kernels into the machine's Python, then runs scripts/gpu_check.py (the kernel tests
# on CUDA, the kernel benchmark against torch.compile, every method on the GPU against the CPU, the
# fedcache-demo FedCache arm, FedZKT's paper-sized server). Writes OUTDIR/gpu_check.json and
# OUTDIR/summary.md; exits 1 when a correctness check fails.
#
#   bash scripts/gpu_check.sh OUTDIR            # on the GPU machine
#   bash scripts/gpu_check.sh OUTDIR --cpu      # the same steps on the CPU, shapes cut down (CI)
#
# What the GPU machine lacks (hnswlib, paho-mqtt, the Fashion-MNIST files) comes from .gpu_carry/,
# which `bash scripts/gpu_pack.sh` fills on a machine with a network (about 31 MB). Where edgefd is
# already installed from this tree (an editable install: CI, a developer's machine) that install is
# used and nothing is installed; a GPU run then needs it built with EDGEFD_CUDA=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || $1 == -* ]]; then
  echo "usage: bash scripts/gpu_check.sh OUTDIR [--cpu] [more options of scripts/gpu_check.py]" >&2
  exit 2
fi
out=$1
shift
cpu=0
for arg in "$@"; do [[ $arg == --cpu ]] && cpu=1; done
python=${PYTHON:-python3}
carry="$root/.gpu_carry"
started=$SECONDS

installed_here() {
  # edgefd importable from this very tree (an editable install of it)
  "$python" - "$root" <<'EOF' 2>/dev/null
import sys
from pathlib import Path
import edgefd
sys.exit(0 if Path(edgefd.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
EOF
}

if installed_here; then
  echo "gpu_check: using the edgefd installed from this tree"
else
  site=${EDGEFD_CHECK_SITE:-/tmp/edgefd-gpu-check-site}
  rm -rf "$site"
  mkdir -p "$site"
  pip=("$python" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site")
  if [[ -d $carry/wheels ]] && compgen -G "$carry/wheels/*" >/dev/null; then
    echo "gpu_check: installing what the machine lacks from .gpu_carry/wheels"
    # hnswlib comes as its source (it has no wheels) and compiles here, against this numpy.
    "${pip[@]}" "$carry"/wheels/*
  fi
  cuda=ON
  defines=()
  if ((cpu)); then
    cuda=OFF
  else
    # Only this machine's GPU architecture (EDGEFD_CUDA_ARCH overrides, e.g. 90): a build for every
    # architecture takes minutes.
    arch=${EDGEFD_CUDA_ARCH:-$("$python" -c 'import torch; major, minor = torch.cuda.get_device_capability(); print(f"{major}{minor}")')}
    defines=(--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="$arch")
  fi
  echo "gpu_check: building edgefd (EDGEFD_CUDA=$cuda) into $site"
  EDGEFD_CUDA=$cuda "${pip[@]}" "${defines[@]}" "$root"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu_check: installed in $((SECONDS - started)) s"
fi
if [[ -d $carry/data && -z ${EDGEFD_DATA_ROOT:-} ]]; then
  export EDGEFD_DATA_ROOT="$carry/data"
fi
exec "$python" "$root/scripts/gpu_check.py" "$out" "$@"
