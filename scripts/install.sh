#!/usr/bin/env bash
# Sets up a fresh machine for edgefd: system packages, a virtual environment, the pinned torch build,
# and edgefd itself (compiling its C++ kernels). Safe to run again: every step is skipped or a no-op
# when done.
#
#   bash scripts/install.sh           # runtime only
#   bash scripts/install.sh --test    # runtime + test tools (and Ray, for the tests of --backend ray)
#   . .venv/bin/activate              # then: edgefd, python3 -m pytest, ...
#
# Python packages go into the virtual environment that is active, else into .venv in the checkout
# (EDGEFD_VENV=DIR: another folder), made with $PYTHON (default python3): never into the system's
# Python, which Debian 12+ and Ubuntu 23.04+ refuse (PEP 668, "externally-managed-environment").
# PyPI has no CPU-only torch for x86-64: its torch is the CUDA build (about 4.4 GB). With
# EDGEFD_TORCH_INDEX=URL pip takes torch and torchvision from that index instead (a mirror, or
# PyTorch's own CPU index where it has the pinned versions).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="datasets,server"
if [[ "${1:-}" == "--test" ]]; then
  extras="datasets,server,test,ray"  # ray: the tests of `--backend ray`; a device never needs it
fi

# System packages: a C++ toolchain and CMake for the kernels, the real Fashion-MNIST files, the
# Mosquitto broker and its clients (edgefd deploy-local, the MQTT integration tests).
apt_packages=(g++ cmake ninja-build python3-venv dataset-fashion-mnist mosquitto mosquitto-clients)
# With --test: an emulated arm64 device for tests/device/test_arm64.py (qemu-user with its binfmt
# handler, mmdebstrap to build a Debian bookworm arm64 root filesystem), RabbitMQ for
# tests/deploy/test_clustered_brokers.py (a two-node cluster with its MQTT plugin, started by the
# test), and Chromium with its WebDriver for tests/dashboard/test_in_browser.py (the live page).
if [[ "${1:-}" == "--test" ]]; then
  apt_packages+=(qemu-user-static binfmt-support mmdebstrap rabbitmq-server chromium chromium-driver)
fi
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then sudo=""; else sudo="sudo"; fi
  echo "[1/4] system packages (apt): ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "[1/4] system packages: all there"
fi
# The tests start RabbitMQ nodes of their own (benchmarks/broker_rigs.py): the package's service, which
# Debian starts where systemd runs, would only hold memory and the default ports.
if dpkg -s rabbitmq-server >/dev/null 2>&1 && command -v systemctl >/dev/null 2>&1 \
    && systemctl is-active --quiet rabbitmq-server 2>/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then sudo=""; else sudo="sudo"; fi
  echo "stopping and disabling the rabbitmq-server service (the tests start their own nodes)"
  $sudo systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
fi

# The virtual environment: the active one, else EDGEFD_VENV or .venv, made once.
if [[ -n ${VIRTUAL_ENV:-} ]]; then
  venv=$VIRTUAL_ENV
else
  venv=${EDGEFD_VENV:-.venv}
  if [[ ! -x $venv/bin/python ]]; then
    echo "[2/4] making the virtual environment $venv (with ${PYTHON:-python3})"
    "${PYTHON:-python3}" -m venv "$venv"
  fi
fi
py="$venv/bin/python"
echo "[2/4] Python packages go into $venv"

# torch first, pinned: an unpinned torch may resolve to a multi-GB build this machine cannot use,
# and PyPI's torchvision only imports beside the matching torch.
case "$(uname -m)" in
  aarch64) torch_pins=(torch==2.9.1 torchvision==0.24.1) ;;
  *) torch_pins=(torch==2.14.1 torchvision==0.29.1) ;;
esac
torch_index=()
if [[ -n ${EDGEFD_TORCH_INDEX:-} ]]; then torch_index=(--index-url "$EDGEFD_TORCH_INDEX"); fi
installed=$("$py" -c "from importlib.metadata import version as v; print(f\"torch=={v('torch')} torchvision=={v('torchvision')}\")" 2>/dev/null || true)
if [[ $installed == "${torch_pins[*]}" ]]; then
  echo "[3/4] ${torch_pins[*]}: installed already"
else
  if [[ -n ${EDGEFD_TORCH_INDEX:-} ]]; then
    echo "[3/4] ${torch_pins[*]} from $EDGEFD_TORCH_INDEX"
  elif [[ $(uname -m) == aarch64 ]]; then
    echo "[3/4] ${torch_pins[*]} from PyPI: the CPU build, about 720 MB installed"
  else
    gpu="this machine has no NVIDIA GPU: torch runs on the CPU"
    if command -v nvidia-smi >/dev/null 2>&1; then gpu="for this machine's NVIDIA GPU"; fi
    echo "[3/4] ${torch_pins[*]} from PyPI: the CUDA build, about 4.4 GB to download and 5.5 GB installed ($gpu)."
    echo "      For another build (PyTorch's CPU-only wheels, a mirror): EDGEFD_TORCH_INDEX=URL bash scripts/install.sh"
  fi
  "$py" -m pip install --progress-bar on "${torch_index[@]}" "${torch_pins[@]}"
fi

# edgefd, built in place (editable) so that tests and benchmarks run against this checkout.
echo "[4/4] edgefd and its dependencies (${extras}), compiling its C++ kernels (about a minute)"
"$py" -m pip install -q scikit-build-core pybind11
"$py" -m pip install -q --no-build-isolation -e ".[${extras}]"
"$py" -c "import edgefd.kernels as k; assert k.cpp_available(), 'C++ kernels failed to build'"
echo "edgefd installed in $venv ($(du -sh "$venv" 2>/dev/null | cut -f1)), C++ kernels built:" \
  "\`. $venv/bin/activate\` puts edgefd on the PATH"
