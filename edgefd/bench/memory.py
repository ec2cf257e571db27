"""What processes hold: a process's peak resident set and its proportional set size, and the memory
a set of processes holds together, each physical page counted once however many of them map it
(their distinct resident pages, from /proc/PID/pagemap; the sum of their PSS where the kernel hides
where pages lie, which it does from others than root). `edgefd bench ray` measures its arms with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def peak_mb_of(pid: int) -> float:
    """A process's peak resident memory (``VmHWM``), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pss_mb_of(pid: int) -> float:
    """A process's proportional set size now (``Pss`` of /proc/PID/smaps_rollup), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


RESIDENT_PAGES = "resident pages"
PSS = "PSS"
PAGE = 4096
_PRESENT = np.uint64(1 << 63)
_FRAME = np.uint64((1 << 55) - 1)
_READ = 1 << 23
"""Bytes of /proc/PID/pagemap read at a time (a mapping of GBs, as Ray's object store, is read in pieces)."""


def frames_of(pid: int) -> np.ndarray | None:
    """The physical frame numbers of ``pid``'s resident pages (empty if it is gone), or None when
    the kernel hides them (frames read as 0 without root)."""
    frames, hidden = [], False
    try:
        with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if line.endswith("[vsyscall]"):
                    continue
                first, last = (int(bound, 16) // PAGE for bound in line.split()[0].split("-"))
                for start in range(first, last, _READ // 8):
                    pagemap.seek(start * 8)
                    entries = np.frombuffer(pagemap.read(min(last - start, _READ // 8) * 8), dtype=np.uint64)
                    present = entries[(entries & _PRESENT) != 0] & _FRAME
                    hidden = hidden or bool(present.size and not present.any())
                    frames.append(present)
    except OSError:
        return np.zeros(0, dtype=np.uint64)
    return None if hidden else np.concatenate(frames) if frames else np.zeros(0, dtype=np.uint64)


def memory_of(pids: list[int]) -> tuple[float, str]:
    """MB that ``pids`` hold together: their distinct resident pages, each physical page once
    (`RESIDENT_PAGES`); where the pages cannot be read, the sum of their PSS (`PSS`)."""
    frames = [frames_of(pid) for pid in pids]
    if any(f is None for f in frames):
        return sum(pss_mb_of(pid) for pid in pids), PSS
    return len(np.unique(np.concatenate([f for f in frames if f is not None]))) * PAGE / 2**20, RESIDENT_PAGES


def descendants(pid: int) -> list[int]:
    """Every process whose parent chain leads to ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found
