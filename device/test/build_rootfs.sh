#!/usr/bin/env bash
# Builds (once) and caches a Debian bookworm arm64 root filesystem: the same Debian release and
# Python (3.11) as Raspberry Pi OS 64-bit, for running device/install.sh under qemu-user emulation
# on an x86-64 machine. Prints the path of the cached root filesystem on stdout.
#
#   bash device/test/build_rootfs.sh            # build if missing, print the path
#   bash device/test/build_rootfs.sh --rebuild  # throw the cached copy away first
#
# Environment:
#   EDGEFD_ARM64_CACHE     cache folder (default ~/.cache/edgefd/arm64)
#   EDGEFD_DEBIAN_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#
# The root filesystem is built into a temporary folder and renamed into place only when complete,
# so an interrupted build never leaves a half-built cache behind. Test runs never write into it:
# they stack a throw-away overlay on top (device/test/arm64_chroot.sh).
# Needs root and: apt-get install qemu-user-static binfmt-support mmdebstrap (or debootstrap).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${EDGEFD_ARM64_CACHE:-$HOME/.cache/edgefd/arm64}"
mirror="${EDGEFD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What a freshly flashed Raspberry Pi OS Lite already has; everything else is install.sh's job.
# Bump the version when this recipe changes so that old caches are not reused.
recipe_version=1
include="python3,python3-venv,python3-pip,ca-certificates"
rootfs="$cache/bookworm-arm64-v$recipe_version"

if [[ "${1:-}" == "--rebuild" ]]; then
  rm -rf "$rootfs"
fi
if [[ -x "$rootfs/usr/bin/python3" ]]; then
  echo "$rootfs"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "build_rootfs.sh: building the root filesystem needs root (debootstrap/mmdebstrap)" >&2
  exit 1
fi
bash "$here/enable_binfmt.sh" >&2

mkdir -p "$cache"
partial="$cache/.partial-bookworm-arm64-v$recipe_version.$$"
trap 'rm -rf "$partial"' EXIT
start=$SECONDS
if command -v mmdebstrap >/dev/null; then
  # mmdebstrap is about twice as fast as debootstrap (one apt run instead of one dpkg per package).
  mmdebstrap --quiet --arch=arm64 --variant=minbase --include="$include" \
    bookworm "$partial" "$mirror" >&2
elif command -v debootstrap >/dev/null; then
  debootstrap --arch=arm64 --variant=minbase --include="$include" \
    bookworm "$partial" "$mirror" >&2
else
  echo "build_rootfs.sh: needs mmdebstrap or debootstrap (apt-get install mmdebstrap)" >&2
  exit 1
fi
# A device has a hostname and name resolution; the chroot shares the host's network.
echo "edgefd-arm64" >"$partial/etc/hostname"
rm -rf "$partial"/var/lib/apt/lists/* "$partial"/var/cache/apt/archives/*.deb
mv "$partial" "$rootfs"
trap - EXIT
echo "built $rootfs in $((SECONDS - start)) s ($(du -sh "$rootfs" | cut -f1))" >&2
echo "$rootfs"
