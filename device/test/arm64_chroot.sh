#!/usr/bin/env bash
# Runs a command inside an emulated arm64 Debian device: the cached root filesystem from
# build_rootfs.sh with a throw-away overlay on top, under qemu-user emulation.
#
#   arm64_chroot.sh --rootfs BASE --work DIR [--host-ca] [--no-network] [--bind HOST:GUEST[:ro]]... [--env K=V]... -- CMD...
#
#   --rootfs BASE       the cached root filesystem (read-only: it is the overlay's lower layer)
#   --work DIR          where this device's changes live (DIR/upper); reuse DIR across calls to keep
#                       them (install, then run), delete DIR to throw the device away
#   --host-ca           trust the host's local CA certificates (/usr/local/share/ca-certificates),
#                       needed behind a TLS-intercepting proxy for pip to reach PyPI
#   --bind HOST:GUEST[:ro]
#                       bind-mount a host folder into the device (created if missing), read-only with :ro
#   --env K=V           extra environment variable for CMD
#   --no-network        no network at all: CMD runs in a network namespace of its own, with only a
#                       loopback interface that is down (an install that must not download anything)
#
# Everything is mounted in a private mount namespace (unshare), so every mount disappears when the
# command ends, however it ends. Without --no-network the device shares the host's network: a
# broker listening on the host's 127.0.0.1 is reachable from inside.
#
# Two things emulation needs (measured): onnxruntime reads /proc/cpuinfo at import and segfaults
# on the host's x86 text, so a Cortex-A72's (Raspberry Pi 4) is bind-mounted over it; and
# QEMU_CPU=cortex-a72 makes torch ~9x faster than qemu's default CPU model.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

if [[ -z "${_EDGEFD_ARM64_NS:-}" ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "arm64_chroot.sh: needs root (mount, chroot)" >&2
    exit 1
  fi
  bash "$here/enable_binfmt.sh" >&2
  namespaces=(--mount --propagation private)
  for arg in "$@"; do
    [[ "$arg" == -- ]] && break
    [[ "$arg" == --no-network ]] && namespaces+=(--net)
  done
  exec unshare "${namespaces[@]}" env _EDGEFD_ARM64_NS=1 bash "$0" "$@"
fi

base="" work="" host_ca=0
binds=() envs=()
while (($#)); do
  case "$1" in
    --rootfs) base="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --host-ca) host_ca=1; shift ;;
    --no-network) shift ;;  # taken care of above: the command runs in a network namespace of its own
    --bind) binds+=("$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "arm64_chroot.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$base" || -z "$work" || $# -eq 0 ]]; then
  echo "usage: arm64_chroot.sh --rootfs BASE --work DIR [--host-ca] [--no-network] [--bind HOST:GUEST[:ro]]... [--env K=V]... -- CMD..." >&2
  exit 2
fi
if [[ ! -x "$base/usr/bin/python3" ]]; then
  echo "arm64_chroot.sh: $base is not a root filesystem from build_rootfs.sh" >&2
  exit 2
fi

mkdir -p "$work/upper" "$work/overlay-work" "$work/root"
root="$work/root"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/overlay-work" "$root"
mount -t proc proc "$root/proc"
mount --bind "$here/cpuinfo-cortex-a72.txt" "$root/proc/cpuinfo"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/tmp"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
cp -L /etc/hosts "$root/etc/hosts"
for spec in "${binds[@]}"; do
  IFS=: read -r host_path guest_path mode <<<"$spec"
  mkdir -p "$root$guest_path"
  mount --bind "$host_path" "$root$guest_path"
  if [[ "$mode" == ro ]]; then
    mount -o remount,bind,ro "$root$guest_path"
  fi
done

guest_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive QEMU_CPU=cortex-a72 "${envs[@]}")

# Appended to the device's bundle from the host side, once per device: `update-ca-certificates`
# inside would rehash every certificate under emulation (minutes).
if ((host_ca)) && [[ ! -e "$work/host-ca-added" ]] && compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cat /usr/local/share/ca-certificates/*.crt >>"$root/etc/ssl/certs/ca-certificates.crt"
  touch "$work/host-ca-added"
fi

chroot "$root" /usr/bin/env -i "${guest_env[@]}" "$@"
