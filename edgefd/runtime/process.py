"""How edgefd starts another edgefd process (deploy-local's server and clients, a recipe's isolated
run): with this interpreter, importing the edgefd this process imported; and a process's own peak
memory (`peak_rss_mb`), which a run, a server and a device record, and its age
(`seconds_since_start`: a device's start-up to its hello); and how a device's C library gives
freed memory back (`return_large_blocks_when_freed`).

``python -m edgefd.cli`` would put the working folder first on ``sys.path``: run from a checkout of
edgefd while edgefd is installed, every child imported the checkout instead, which has no compiled
kernels (they fell back to the torch references, and a deployed FedCache drifted from its
simulation) and may hold other code. The children here run as the ``edgefd`` console script does,
without the working folder on ``sys.path``.
"""

from __future__ import annotations

import ctypes
import os
import sys

_MAIN = "import sys; sys.path[:] = [p for p in sys.path if p]; from {module} import main; sys.exit(main())"


def edgefd_command(*args: str, module: str = "edgefd.cli") -> list[str]:
    """The command line that runs ``module``'s ``main()`` with ``args`` in a new process."""
    return [sys.executable, "-c", _MAIN.format(module=module), *args]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (its whole life: run a measured run in a
    process of its own, as `edgefd reproduce` does for recipes that report memory).

    Linux's VmHWM, the peak of this program's own memory: `ru_maxrss` would also count the parent's
    memory at the fork before this program was started (a server started by a 2 GB test process
    would report 2 GB). Elsewhere `ru_maxrss`."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:
        pass
    import resource  # Unix only

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(kib / 1024, 1)


M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter for the size from which an allocation gets its own memory map."""


def return_large_blocks_when_freed(threshold: int = 128 * 1024) -> bool:
    """Have glibc give every block of ``threshold`` bytes or more its own memory map, returned to
    the system when freed; True if set (False off glibc, where nothing changes).

    glibc starts there (128 KiB) but raises the threshold to the size of each such block freed, up
    to 32 MiB, so after a device's first training step a mini-batch's activations (16 MiB each for
    FedICT's client at batch 256) come from its heaps, which keep freed memory and fragment: the
    client's training peaked 130 MB higher, and 260 MB freed stayed with the process after it
    (benchmarks/device_memory.py). Fixing the threshold stops that; nothing computed changes. Call
    it early: blocks already kept in the heaps stay there."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, its C library's among them
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc: its mallopt, if any, takes other numbers
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def seconds_since_start() -> float | None:
    """Seconds since this process started (the interpreter's start, imports included), from
    Linux's /proc; None elsewhere. A device logs it with its hello: its start-up time."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the name in brackets may hold spaces
        with open("/proc/uptime") as uptime:
            now = float(uptime.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, field 22 of proc(5)
    return round(max(0.0, now - started), 2)
