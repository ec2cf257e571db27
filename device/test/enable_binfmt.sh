#!/usr/bin/env bash
# Makes the kernel run aarch64 binaries through qemu-aarch64-static (binfmt_misc).
# `apt-get install qemu-user-static binfmt-support` registers the handler on a normal host; inside a
# container binfmt_misc is often not mounted, so the registration has to be (re)done here.
# The handler is registered with the F flag: the kernel opens the interpreter once, so the chroot
# does not need its own copy of qemu.
set -euo pipefail

entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
if [[ -e $entry ]] && grep -q '^enabled' "$entry"; then
  exit 0
fi
if ! command -v update-binfmts >/dev/null || [[ ! -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]]; then
  echo "enable_binfmt.sh: needs qemu-user-static and binfmt-support (apt-get install qemu-user-static binfmt-support)" >&2
  exit 1
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
  mount binfmt_misc -t binfmt_misc /proc/sys/fs/binfmt_misc
fi
update-binfmts --enable qemu-aarch64
grep -q '^enabled' "$entry" || { echo "enable_binfmt.sh: qemu-aarch64 is still not enabled" >&2; exit 1; }
echo "qemu-aarch64 binfmt handler enabled"
