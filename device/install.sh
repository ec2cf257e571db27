#!/usr/bin/env bash
# Installs the edgefd client runtime on an edge device: Raspberry Pi OS 64-bit (Debian bookworm,
# arm64) or a Jetson with Ubuntu 22.04 (JetPack 6, arm64). Run it as root on the device:
#
#   sudo bash device/install.sh --bundle edgefd-device-0.1.0-cp311-aarch64.tar   # offline
#   sudo bash edgefd-device-0.1.0-cp311-aarch64/install.sh   # the same, from the unpacked bundle
#   sudo bash device/install.sh                        # from the checkout this script sits in
#   sudo bash device/install.sh --source edgefd-0.1.0.tar.gz
#   sudo bash device/install.sh --source edgefd-0.1.0-cp311-cp311-linux_aarch64.whl --no-service
#
# What it does (every step is skipped when already done, so it is safe to run again; edgefd is
# rebuilt only when its source changed):
#   1. apt: Python's venv and headers, g++, CMake and Ninja (edgefd's C++ kernels compile on the
#      device; hnswlib, the server's extra, is not installed on devices). Not with --bundle: the
#      bundle's edgefd wheel is already compiled, and nothing is downloaded;
#   2. a virtual environment in PREFIX/venv with the aarch64 CPU torch that PyPI has
#      (device/torch-aarch64.txt), or the system's torch (--torch system, for NVIDIA's
#      JetPack build on a Jetson);
#   3. edgefd into that venv, compiling the kernels (or the bundle's compiled wheel), with the
#      dependencies a device uses (device/requirements.txt: not the workstation's plotting and
#      export packages), and a check that they load;
#   4. a service: system user `edgefd`, /etc/edgefd/client.toml (from client.example.toml, never
#      overwritten), /etc/systemd/system/edgefd-client.service, and /usr/local/bin/edgefd.
#      The service is installed but not started: edit the config first, then
#      `systemctl enable --now edgefd-client`.
#
# Options:
#   --bundle FILE     install from an offline bundle made by device/bundle.sh on a workstation (the
#                     .tar file, or the folder it unpacks to): no network, no compiler, no apt. The
#                     default when this script sits in an unpacked bundle
#   --source SRC      a source folder (default: the checkout holding this script), an sdist, a wheel,
#                     or any pip requirement (e.g. git+https://...). A folder is copied to PREFIX/src
#                     first, so the device keeps what it was built from and the original is not written.
#   --prefix DIR      where the venv (and copied source) live (default /opt/edgefd)
#   --torch pypi|system
#                     pypi (default): the pinned CPU wheels; system: reuse a torch already installed
#                     for the system Python (the venv sees system site-packages)
#   --cuda            build edgefd's CUDA kernels too (Jetson Orin, JetPack 6: needs nvcc on PATH)
#   --no-service      install the runtime only (no user, config, unit or /usr/local/bin link)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
source_spec=""
bundle=""
prefix=/opt/edgefd
torch_from=pypi
cuda=OFF
service=1
while (($#)); do
  case "$1" in
    --source) source_spec="$2"; shift 2 ;;
    --bundle) bundle="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --torch) torch_from="$2"; shift 2 ;;
    --cuda) cuda=ON; shift ;;
    --no-service) service=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[edgefd install] $*"; }
die() { echo "[edgefd install] error: $*" >&2; exit 1; }

[[ "$torch_from" == pypi || "$torch_from" == system ]] || die "--torch must be pypi or system, not '$torch_from'"
[[ -z "$bundle" || -z "$source_spec" ]] || die "--bundle and --source name two sources: give one"
# In an unpacked bundle (bundle.json beside this script), the bundle is the default source.
if [[ -z "$bundle" && -z "$source_spec" && -f "$here/bundle.json" ]]; then
  bundle="$here"
fi

# --- the offline bundle: checked before anything is installed ------------------------------------
if [[ -n "$bundle" ]]; then
  [[ "$cuda" == OFF ]] || die "--cuda needs a compiler on the device: the bundle's kernels are CPU builds (use --source with --cuda)"
  if [[ -f "$bundle" ]]; then
    unpacked="$(mktemp -d "${TMPDIR:-/var/tmp}/edgefd-bundle.XXXXXX")"
    trap 'rm -rf "$unpacked"' EXIT
    say "unpacking $bundle"
    tar -xf "$bundle" -C "$unpacked" || die "$bundle is not a readable bundle (tar failed): copy it again"
    found=("$unpacked"/*/bundle.json)
    [[ -f "${found[0]}" ]] || die "$bundle holds no bundle.json: not a bundle made by device/bundle.sh"
    bundle_dir="$(dirname "${found[0]}")"
  elif [[ -d "$bundle" ]]; then
    [[ -f "$bundle/bundle.json" ]] || die "$bundle holds no bundle.json: not a bundle made by device/bundle.sh"
    bundle_dir="$(cd "$bundle" && pwd)"
  else
    die "--bundle $bundle: no such file or folder"
  fi
  # What the bundle is for, and that every wheel arrived whole (a copy to an SD card can be cut
  # short): one line naming the problem, before anything is installed.
  python3 - "$bundle_dir" <<'PY' || exit 1
import hashlib, json, platform, sys
from pathlib import Path

folder = Path(sys.argv[1])
def fail(message):
    print(f"[edgefd install] error: {message}", file=sys.stderr)
    sys.exit(1)
try:
    manifest = json.loads((folder / "bundle.json").read_text())
    wheels = manifest["wheels"]
    arch, python = manifest["arch"], manifest["python"]
except (ValueError, KeyError, TypeError) as problem:
    fail(f"{folder / 'bundle.json'} is not a bundle manifest ({problem!r}): make the bundle again")
here = f"{sys.version_info.major}.{sys.version_info.minor}"
if arch != platform.machine():
    fail(f"this bundle is for {arch} devices; this one is {platform.machine()}")
if python != here:
    fail(f"this bundle is for Python {python}; this device has Python {here} (make a bundle for it, or use --source)")
files = {f"wheels/{name}": digest for name, digest in wheels.items()}
files.update({f"debs/{name}": digest for name, digest in manifest.get("debs", {}).items()})
for name, digest in sorted(files.items()):
    path = folder / name
    if not path.is_file():
        fail(f"the bundle lacks {name}: copy it again")
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        fail(f"{name} is damaged (its sha256 is not the manifest's): copy the bundle again")
print(f"[edgefd install] bundle: edgefd {manifest['edgefd']} for {arch}, Python {python}, {len(files)} files checked")
PY
  # Everything else comes from the bundle too: its pins, its dependency list, its service files.
  here="$bundle_dir"
fi

[[ $(id -u) -eq 0 ]] || die "run as root (sudo bash $0 ...): it installs apt packages and a service"

# --- where edgefd comes from --------------------------------------------------------------------
if [[ -n "$bundle" ]]; then
  :
elif [[ -z "$source_spec" ]]; then
  [[ -f "$here/../pyproject.toml" ]] || die "no --source given and $here/.. is not an edgefd checkout"
  source_spec="$(cd "$here/.." && pwd)"
fi

# --- the platform ---------------------------------------------------------------------------------
arch="$(uname -m)"
. /etc/os-release
platform="$ID ${VERSION_CODENAME:-$VERSION_ID}"
if [[ -e /etc/nv_tegra_release ]]; then
  platform="$platform (Jetson: $(head -c 60 /etc/nv_tegra_release | tr -d '#\n'))"
fi
say "platform: $platform, $arch"
case "$arch" in
  aarch64) mapfile -t torch_pins < <(grep -v -e '^#' -e '^$' "$here/torch-aarch64.txt") ;;  # PyPI's CPU wheels
  x86_64) torch_pins=(torch==2.14.1 torchvision==0.29.1) ;;  # same pins as scripts/install.sh
  *) die "unsupported architecture $arch (edgefd devices are aarch64)" ;;
esac
case "$ID" in
  debian|raspbian|ubuntu) ;;
  *) say "warning: $ID is not Debian, Raspberry Pi OS or Ubuntu; trying anyway" ;;
esac

# --- 1. system packages ---------------------------------------------------------------------------
apt_packages=(python3 python3-venv python3-pip python3-dev g++ cmake ninja-build ca-certificates)
if [[ -n "$bundle" ]]; then
  apt_packages=()  # nothing to compile, nothing to download
  # The OpenMP runtime the kernels link to comes with a compiler: from the bundle where it is missing.
  if ! dpkg -s libgomp1 >/dev/null 2>&1 && compgen -G "$here/debs/*.deb" >/dev/null; then
    say "dpkg -i $(cd "$here/debs" && echo *.deb) (from the bundle)"
    dpkg -i "$here"/debs/*.deb >/dev/null
  fi
fi
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "edgefd needs Python >= 3.10; this system has $(python3 -V) (Jetson: JetPack 6 / Ubuntu 22.04 or newer)"

# --- 2. the virtual environment and torch ---------------------------------------------------------
venv="$prefix/venv"
if [[ ! -x "$venv/bin/python" ]]; then
  say "creating $venv"
  mkdir -p "$prefix"
  venv_options=()
  if [[ "$torch_from" == system ]]; then venv_options+=(--system-site-packages); fi
  if [[ -n "$bundle" ]] && ! python3 -c 'import ensurepip' 2>/dev/null; then
    # No python3-venv (Debian and Ubuntu split ensurepip out) and no network to apt-get it: a venv
    # without pip, then pip from the bundle's own wheel, which runs as a zip.
    python3 -m venv --without-pip "${venv_options[@]}" "$venv"
    pip_wheel=("$here"/wheels/pip-*.whl)
    "$venv/bin/python" "${pip_wheel[0]}/pip" install -q --no-index "${pip_wheel[0]}"
  else
    python3 -m venv "${venv_options[@]}" "$venv"
  fi
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
if [[ -n "$bundle" ]]; then
  # Only the bundle's wheels: pip never looks for a network.
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$here/wheels"
fi
if [[ "$torch_from" == system ]]; then
  "$venv/bin/python" -c 'import torch' 2>/dev/null \
    || die "--torch system, but the system Python has no torch (install NVIDIA's JetPack wheel first)"
else
  installed="$("$venv/bin/python" -c 'from importlib.metadata import version as v
try: print(" ".join(n + "==" + v(n).split("+")[0] for n in ("torch", "torchvision")))
except Exception: pass')"
  if [[ "$installed" == "${torch_pins[*]}" ]]; then
    say "torch already installed (${torch_pins[*]})"
  else
    say "pip install ${torch_pins[*]}"
    "${pip[@]}" install -q "${torch_pins[@]}"
  fi
fi

# --- 3. edgefd ------------------------------------------------------------------------------------
# What the installed edgefd was built from: a re-run with the same source (and flags) skips the
# rebuild, which takes minutes on a Pi.
if [[ -n "$bundle" ]]; then
  edgefd_wheel=("$here"/wheels/edgefd-*.whl)
  fingerprint="bundle $(sha256sum "${edgefd_wheel[0]}" | cut -d' ' -f1)"
elif [[ -d "$source_spec" ]]; then
  [[ -f "$source_spec/pyproject.toml" ]] || die "$source_spec is a folder but not an edgefd checkout"
  # The host's build folder holds another architecture's objects: never carry it over; nor the
  # caches and results that change without the source changing.
  pack() { tar -C "$source_spec" --sort=name --exclude=./build --exclude=./.git --exclude='__pycache__' \
    --exclude='*.so' --exclude='*.o' --exclude=./.pytest_cache --exclude=./.hypothesis --exclude=./runs \
    --exclude=./dist --exclude='*.egg-info' -cf - . ; }
  fingerprint="folder $(pack | sha256sum | cut -d' ' -f1) cuda=$cuda"
elif [[ -f "$source_spec" ]]; then
  fingerprint="file $(sha256sum "$source_spec" | cut -d' ' -f1) cuda=$cuda"
else
  fingerprint=""  # a pip requirement (e.g. git+https://...): always reinstalled
fi
# Builds edgefd from $source_spec into the venv: the kernels compile here.
install_from_source() {
  if [[ -d "$source_spec" ]]; then
    say "copying $source_spec to $prefix/src"
    rm -rf "$prefix/src"
    mkdir -p "$prefix/src"
    pack | tar -C "$prefix/src" -xf -
    target="$prefix/src"
  else
    target="$source_spec"
  fi
  say "pip install edgefd from $target (compiles the C++ kernels; CUDA kernels: $cuda)"
  # Without build isolation the build tools come from the venv: scikit-build-core and pybind11 for
  # edgefd (setuptools and wheel for any sdist a dependency may bring).
  "${pip[@]}" install -q scikit-build-core pybind11 setuptools wheel
  # --no-deps: a device gets what the client and predict use (device/requirements.txt), not the
  # workstation's plotting and export packages, and pip never swaps the torch chosen above (a
  # Jetson's) for a PyPI one to satisfy torchvision.
  EDGEFD_CUDA="$cuda" "${pip[@]}" install -q --no-build-isolation --no-deps "$target"
}
stamp="$prefix/installed-from"
if [[ -n "$fingerprint" && -e "$stamp" && "$(cat "$stamp")" == "$fingerprint" ]] \
  && "$venv/bin/python" -c 'import importlib.metadata as m; m.version("edgefd")' 2>/dev/null; then
  if [[ -n "$bundle" ]]; then say "edgefd already installed from this bundle"; else say "edgefd already installed from this source"; fi
else
  rm -f "$stamp"
  if [[ -n "$bundle" ]]; then
    say "pip install edgefd from the bundle (${edgefd_wheel[0]##*/}: kernels already compiled)"
    "${pip[@]}" install -q --no-deps "${edgefd_wheel[0]}"
  else
    install_from_source
  fi
  say "pip install -r $here/requirements.txt (the device's dependencies)"
  "${pip[@]}" install -q -r "$here/requirements.txt"
  [[ -z "$fingerprint" ]] || echo "$fingerprint" >"$stamp"
fi
"$venv/bin/python" -c "import edgefd, edgefd.kernels as k; assert k.cpp_available(), 'C++ kernels did not load'; print('[edgefd install] edgefd', edgefd.__version__, 'with C++ kernels')"
"$venv/bin/python" -c 'import torchvision' 2>/dev/null \
  || say "warning: no torchvision here: DFL's mobilenet_v2 and vgg16 and FedCache's encoder=mobilenet need it"

# --- 4. the service -------------------------------------------------------------------------------
if ((service)); then
  id edgefd >/dev/null 2>&1 || useradd --system --home-dir /var/lib/edgefd --create-home \
    --shell /usr/sbin/nologin edgefd
  install -d -m 0755 /etc/edgefd
  if [[ ! -e /etc/edgefd/client.toml ]]; then
    install -m 0644 "$here/client.example.toml" /etc/edgefd/client.toml
    say "wrote /etc/edgefd/client.toml (edit it: broker, run, client id)"
  fi
  sed "s#/opt/edgefd/venv#$venv#g" "$here/edgefd-client.service" >/etc/systemd/system/edgefd-client.service
  ln -sf "$venv/bin/edgefd" /usr/local/bin/edgefd
  if [[ -d /run/systemd/system ]]; then
    systemctl daemon-reload
    say "service installed: edit /etc/edgefd/client.toml, then: systemctl enable --now edgefd-client"
  else
    say "service unit written (systemd is not running here, so it was not loaded)"
  fi
fi
say "done: $venv/bin/edgefd"
