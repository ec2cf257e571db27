"""`edgefd bench cache`: FedCache's knowledge cache at scale.

For N samples of d-dimensional hashes in C classes (clustered Gaussian data, so that nearest
neighbours mean something) it measures, per HNSW setting: the time to build the relations (one
hnswlib index per class, R nearest same-class neighbours each), the time of one round's lookups
for all N samples (`gather_mean` over the whole neighbour table) and of writing N new logit rows,
the peak memory of the process that did it, and recall@R against exact search on a sample of
queries. Each setting runs in its own process so that its peak memory is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from dataclasses import asdict, dataclass
from queue import Empty

import numpy as np


@dataclass
class CacheBenchConfig:
    samples: int = 1_000_000
    dim: int = 64
    classes: int = 10
    neighbours: int = 16
    m: int = 16
    ef_construction: int = 200
    ef: int = 64
    threads: int = 2
    recall_queries: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < self.recall_queries:
            raise ValueError(
                f"samples: at least {self.recall_queries} (the recall check draws that many distinct queries), "
                f"got {self.samples}"
            )


@dataclass
class CacheBenchResult:
    config: CacheBenchConfig
    build_seconds: float
    lookup_seconds: float
    update_seconds: float
    peak_rss_mb: float
    recall: float


def clustered_hashes(n: int, dim: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each class is a mixture of 8 Gaussian clusters: neighbours exist at every scale."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes * 8, dim), dtype=np.float32) * 2
    labels = rng.integers(0, classes, size=n)
    cluster = labels * 8 + rng.integers(0, 8, size=n)
    hashes = centres[cluster]
    hashes += rng.standard_normal((n, dim), dtype=np.float32)
    return hashes, labels


def _exact_neighbours(hashes: np.ndarray, labels: np.ndarray, queries: np.ndarray, r: int) -> list[set[int]]:
    unit = hashes / np.linalg.norm(hashes, axis=1, keepdims=True)
    out = []
    for q in queries:
        same = np.flatnonzero(labels == labels[q])
        same = same[same != q]
        sims = unit[same] @ unit[q]
        out.append(set(same[np.argpartition(-sims, r - 1)[:r]].tolist()))
    return out


def _measure(config: CacheBenchConfig) -> CacheBenchResult:
    import torch

    from edgefd import kernels
    from edgefd.algorithms.fedcache.relations import RelationConfig, build_relations

    kernels.set_num_threads(config.threads)
    hashes, labels = clustered_hashes(config.samples, config.dim, config.classes, config.seed)
    relations = RelationConfig(config.neighbours, "hnsw", config.m, config.ef_construction, config.ef, config.threads)
    start = time.perf_counter()
    table = build_relations(hashes, labels, relations)
    build = time.perf_counter() - start

    logits = torch.randn(config.samples, config.classes)  # the cache's rows (`KnowledgeCache.logits`)
    neighbours = torch.from_numpy(table)
    kernels.gather_mean(logits, neighbours)  # warm-up
    start = time.perf_counter()
    kernels.gather_mean(logits, neighbours)
    lookup = time.perf_counter() - start
    new_logits = torch.randn(config.samples, config.classes)
    rows = torch.from_numpy(np.random.default_rng(1).permutation(config.samples))
    start = time.perf_counter()
    logits[rows] = new_logits
    update = time.perf_counter() - start

    queries = np.random.default_rng(2).choice(config.samples, size=config.recall_queries, replace=False)
    exact = _exact_neighbours(hashes, labels, queries, config.neighbours)
    recall = float(np.mean([len(set(table[q].tolist()) & e) / config.neighbours for q, e in zip(queries, exact)]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return CacheBenchResult(
        config, round(build, 2), round(lookup, 4), round(update, 4), round(peak, 1), round(recall, 4)
    )


def _worker(config: CacheBenchConfig, queue) -> None:
    queue.put(_measure(config))


def measure(config: CacheBenchConfig) -> CacheBenchResult:
    """Runs one setting in a fresh process (its peak memory is then its own)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_worker, args=(config, queue))
    process.start()
    while True:
        try:
            result = queue.get(timeout=1.0)
            break
        except Empty:
            if not process.is_alive():  # died before reporting (out of memory, an import error)
                raise RuntimeError(
                    f"edgefd bench cache: the measuring process exited with code {process.exitcode} "
                    f"before reporting ({config})"
                ) from None
    process.join()
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = CacheBenchConfig()
    parser.add_argument(
        "--samples",
        type=int,
        metavar="N",
        default=defaults.samples,
        help="number of cached samples (hashes), e.g. 100000 for a quicker run; at least "
        f"{defaults.recall_queries:,} (the recall queries) (default: %(default)s)",
    )
    parser.add_argument(
        "--dim", type=int, metavar="D", default=defaults.dim, help="floats per hash (default: %(default)s)"
    )
    parser.add_argument(
        "--classes",
        type=int,
        metavar="C",
        default=defaults.classes,
        help="classes: one HNSW index each, and the width of each cached logit row (default: %(default)s)",
    )
    parser.add_argument(
        "--neighbours",
        type=int,
        metavar="R",
        default=defaults.neighbours,
        help="same-class neighbours related to each sample, whose logits a lookup averages; recall is "
        "recall@R (default: %(default)s)",
    )
    parser.add_argument(
        "--m",
        type=int,
        action="append",
        metavar="M",
        help="HNSW M (links per node) to measure, each in its own process; repeat for several, e.g. --m 16 "
        "--m 64 (default: 16 and 64)",
    )
    parser.add_argument(
        "--ef-construction",
        type=int,
        metavar="N",
        default=defaults.ef_construction,
        help="HNSW ef_construction: candidate list size while building; larger is slower and more exact "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--ef",
        type=int,
        metavar="N",
        default=defaults.ef,
        help="HNSW ef: candidate list size while searching for the neighbours; larger is slower and more "
        "exact (default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        default=defaults.threads,
        help="threads for building the indexes and for the kernels (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write one record per M (config and figures) to FILE, e.g. docs/bench-cache.json "
        "(default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    results = []
    for m in args.m or [16, 64]:
        try:
            config = CacheBenchConfig(
                args.samples, args.dim, args.classes, args.neighbours, m, args.ef_construction, args.ef, args.threads
            )
        except ValueError as error:
            print(f"edgefd bench cache: {error}", file=sys.stderr)
            return 2
        print(
            f"N={config.samples:,} d={config.dim} C={config.classes} R={config.neighbours} M={m} "
            f"ef_construction={config.ef_construction} ef={config.ef}: building ...",
            flush=True,
        )
        result = measure(config)
        results.append(result)
        print(
            f"  relations {result.build_seconds:.1f} s, lookups for all {config.samples:,} samples "
            f"{result.lookup_seconds:.3f} s, cache update {result.update_seconds:.3f} s, "
            f"peak memory {result.peak_rss_mb:.0f} MB, recall@{config.neighbours} {result.recall:.3f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)
    return 0
