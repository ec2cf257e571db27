#!/usr/bin/env bash
# Makes the offline device bundle on a workstation: one .tar file holding everything
# device/install.sh needs to install edgefd's client runtime on a Raspberry Pi OS 64-bit device
# with no network and no compiler.
#
#   sudo bash device/bundle.sh --out edgefd-device.tar
#   scp edgefd-device.tar pi@DEVICE:            # then, on the device:
#   tar -xf edgefd-device.tar && sudo bash edgefd-device-*/install.sh
#
# The bundle holds edgefd's aarch64 wheel with its compiled C++ kernels, the aarch64 wheels of
# torch and torchvision (device/torch-aarch64.txt), of device/requirements.txt and of everything
# they need, pip's own wheel, Debian's libgomp1 (the OpenMP runtime the kernels link to, which
# comes with a compiler and may be missing), install.sh, the service unit, the config template,
# and bundle.json (what it is for, and every file's sha256, which install.sh checks before
# installing anything).
#
# It is made on an emulated device: Debian bookworm arm64 with Python 3.11, Raspberry Pi OS
# 64-bit's release and Python, under qemu-user (device/test/build_rootfs.sh and arm64_chroot.sh,
# which the tests use too). There edgefd is compiled once, and pip resolves the dependencies as a
# device would. So it needs root, a network, and `apt-get install qemu-user-static binfmt-support
# mmdebstrap`. A bundle is for one architecture and Python: a Jetson on JetPack 6 (Ubuntu 22.04,
# Python 3.10) installs with `install.sh --source` instead.
#
# Options:
#   --out FILE     where to write the bundle (required); ends in .tar
#   --source DIR   the edgefd checkout to build (default: the one holding this script)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out=""
source_dir="$(cd "$here/.." && pwd)"
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --source) source_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[edgefd bundle] $*"; }
die() { echo "[edgefd bundle] error: $*" >&2; exit 1; }

[[ -n "$out" ]] || die "--out FILE is required"
[[ "$out" == *.tar ]] || die "--out $out: the bundle is a .tar file (its wheels are compressed already)"
[[ -f "$source_dir/pyproject.toml" ]] || die "$source_dir is not an edgefd checkout (no pyproject.toml)"
[[ $(id -u) -eq 0 ]] || die "run as root (sudo bash $0 ...): the emulated device needs mount and chroot"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
started=$SECONDS

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$source_dir/pyproject.toml" | head -1)"
name="edgefd-device-$version-cp311-aarch64"
cache="${EDGEFD_ARM64_CACHE:-$HOME/.cache/edgefd/arm64}"
work="$(mktemp -d "${TMPDIR:-/var/tmp}/edgefd-bundle.XXXXXX")"
trap 'rm -rf "$work"' EXIT
stage="$work/stage/$name"
mkdir -p "$stage/wheels" "$stage/debs" "$work/src" "$cache/pip" "$cache/apt-archives/partial"

# The source as a fresh clone has it (tracked and not-ignored files), not the host's build folders.
if git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # --ignore-failed-read: a tracked file deleted in the work tree is left out, as a commit would.
  git -C "$source_dir" ls-files -z --cached --others --exclude-standard \
    | tar -C "$source_dir" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$work/src" -xf -
else
  tar -C "$source_dir" --exclude=./build --exclude=./.git --exclude='__pycache__' --exclude='*.so' \
    --exclude='*.o' --exclude=./.venv -cf - . | tar -C "$work/src" -xf -
fi

say "the emulated device (Debian bookworm arm64)"
rootfs="$(bash "$here/test/build_rootfs.sh" | tail -1)"
# On the device: the compiler, edgefd's wheel (built once, here), then every wheel a device needs,
# resolved by the device's own pip (a workstation's pip would resolve for x86-64).
build='set -euo pipefail
apt-get update -qq
apt-get install -y -qq --no-install-recommends g++ cmake ninja-build python3-dev >/dev/null
python3 -m venv /tmp/build
pip=(/tmp/build/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install -q scikit-build-core pybind11
cp -r /mnt/src /tmp/src
echo "[edgefd bundle] compiling edgefd for aarch64"
"${pip[@]}" wheel -q --no-deps --no-build-isolation -w /mnt/wheels /tmp/src
echo "[edgefd bundle] downloading the aarch64 wheels"
"${pip[@]}" download -q --only-binary=:all: -d /mnt/wheels pip \
  -r /tmp/src/device/torch-aarch64.txt -r /tmp/src/device/requirements.txt
# The kernels link to the OpenMP runtime, which comes with a compiler: a device without one gets
# its package from the bundle.
cd /mnt/debs && apt-get download -qq libgomp1'
bash "$here/test/arm64_chroot.sh" --rootfs "$rootfs" --work "$work/device" --host-ca \
  --bind "$work/src:/mnt/src:ro" --bind "$stage/wheels:/mnt/wheels" --bind "$stage/debs:/mnt/debs" \
  --bind "$cache/pip:/root/.cache/pip" --bind "$cache/apt-archives:/var/cache/apt/archives" \
  --env PIP_NO_COMPILE=1 -- bash -c "$build"
rm -rf "$work/device"  # the build device's overlay: a compiler and a venv, not needed any more

for file in install.sh torch-aarch64.txt requirements.txt edgefd-client.service client.example.toml; do
  cp "$source_dir/device/$file" "$stage/"
done
python3 - "$stage" "$version" <<'PY'
import datetime, hashlib, json, sys
from pathlib import Path

stage, version = Path(sys.argv[1]), sys.argv[2]
def digests(folder: str, pattern: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((stage / folder).glob(pattern))}

wheels, debs = digests("wheels", "*.whl"), digests("debs", "*.deb")
assert any(name.startswith("edgefd-") for name in wheels), "no edgefd wheel was built"
assert any(name.startswith("libgomp1_") for name in debs), "no libgomp1 package was downloaded"
manifest = {
    "format": 1,
    "edgefd": version,
    "arch": "aarch64",
    "python": "3.11",
    "made": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "wheels": wheels,
    "debs": debs,
}
(stage / "bundle.json").write_text(json.dumps(manifest, indent=1) + "\n")
PY
tar -C "$work/stage" -cf "$out" "$name"
say "wrote $out: $(du -m "$out" | cut -f1) MB, $(ls "$stage/wheels" | wc -l) wheels, $(ls "$stage/debs" | wc -l) Debian package(s), in $((SECONDS - started)) s"
