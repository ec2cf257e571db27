#!/usr/bin/env bash
# Fills .gpu_carry/ with what a GPU machine with no network needs for scripts/gpu_check.sh and
# lacks: hnswlib's source (it has no wheels), paho-mqtt's wheel, the embedded broker's (amqtt, for
# the deployed-client step: such a machine has no Mosquitto) and the four Fashion-MNIST files.
# Run it on a machine with a network and the files (apt-get install dataset-fashion-mnist); then
# carry .gpu_carry with the tree (about 31 MB; it is git-ignored).
#
#   bash scripts/gpu_pack.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.gpu_carry"
fmnist=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
rm -rf "$carry"
mkdir -p "$carry/wheels" "$carry/data/fmnist"
python3 -m pip download -q --no-deps --no-build-isolation --no-binary :all: -d "$carry/wheels" "hnswlib==0.8.0"
python3 -m pip download -q --no-deps --only-binary :all: -d "$carry/wheels" "paho-mqtt>=2.0,<3"
# amqtt and what of its needs the GPU machine's image lacks (it has psutil, pyyaml, typer, typing-extensions),
# for its Python (3.12)
python3 -m pip download -q --no-deps --only-binary :all: -d "$carry/wheels" --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  "amqtt==0.12.1" dacite pwdlib transitions "websockets==15.0.1"
for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ ! -f $fmnist/$name.gz ]]; then
    echo "gpu_pack: $fmnist/$name.gz is missing (apt-get install dataset-fashion-mnist, or set FASHION_MNIST_DIR)" >&2
    exit 1
  fi
  cp "$fmnist/$name.gz" "$carry/data/fmnist/"
done
du -sh "$carry"
