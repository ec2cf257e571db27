"""`edgefd reproduce NAME`: a paper's small-scale recipe, several seeds, one results table.

A recipe is a shared simulation setting plus the methods it compares (each with its own
hyperparameters). Every (method, seed) run is an ordinary `edgefd simulate` run written under
OUT/NAME/METHOD-sSEED, and the table (mean ± std over seeds of the best and final accuracy, the
bytes, and the bytes each method needed to reach a common target accuracy) is printed and
written to OUT/NAME/results.md, ready to paste into docs/RESULTS.md. With ``--backend ray`` the
runs are Ray tasks (`edgefd.reproduce_ray`); the table is the same.

The package, by concern: `edgefd.recipes` holds the recipes (data, one module per paper); here
`runs` makes a recipe's runs, `table` its table, `verify` compares a page's tables with the code's,
and this module is the command.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from edgefd import results_page
from edgefd.recipes import RECIPES, Recipe
from edgefd.reproduce.code_record import records_path, table_record, write_record
from edgefd.reproduce.runs import run_recipe
from edgefd.reproduce.table import command_text
from edgefd.reproduce.verify import check_docs, verify, verify_rule
from edgefd.reproduce_ray import Cluster, NoRay
from edgefd.runtime.config import BACKENDS

RESULTS_PAGE = "docs/RESULTS.md"


class _RenamedFlag(argparse.Action):
    """A flag's old spelling: an error that names the new one (never taken silently)."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        parser.error(
            f"{option} is now {self.new} N: the runs at a time on a local Ray (simulate's --workers, Ray actors "
            "that host clients, is another thing)"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "recipe",
        nargs="?",
        choices=sorted(RECIPES),
        metavar="RECIPE",
        help="the recipe to run, one of: %(choices)s (docs/RESULTS.md has each one's setting and results)",
    )
    parser.add_argument(
        "--write-docs",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="also write the table, stamped with this code's revision and the thread count, between the "
        f"recipe's markers in PAGE (default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--check-docs",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="run nothing: say which recipes' tables in PAGE are stale (the recipe or a file its runs depend on "
        "changed since the table was made, docstrings aside, or no generated table); exit status 1 if any is "
        f"(default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="run RECIPE again, afresh, at --seeds (default: its first seed) with the thread count of its "
        "table in PAGE, and compare every arm's per-seed accuracies with the table; exit status 1 if any "
        f"differs (default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="runs/reproduce",
        help="folder for the runs (DIR/RECIPE/METHOD-sSEED) and the table (DIR/RECIPE/results.md) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="seeds to run every method with, e.g. --seeds 0 1 (default: the recipe's own, 2 to 4 seeds)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="run N rounds instead of the recipe's, for a quick look (the table is then not the recipe's) "
        "(default: the recipe's)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for every run instead of the recipe's (1 lets two recipes share two cores; "
        "not part of the compared setting) (default: the recipe's)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="run every arm again; by default a run whose folder holds a finished run of the same config "
        "(its run.toml and summary.json) made with the method params this code would use is kept, so an "
        "interrupted recipe goes on where it stopped",
    )
    _add_ray_arguments(parser)


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the runs go: this process, or Ray (its flags are for --backend ray alone)."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="inprocess",
        help="where the runs go: inprocess (one after another) or ray (each (method, seed) run left to do "
        "is a Ray task, on this machine or a cluster: docs/RAY.md); the table is the same (default: %(default)s)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="with --backend ray: runs at a time on the local Ray it starts (N x the runs' threads CPUs) (default: 2)",
    )
    parser.add_argument(
        "--workers",
        nargs="?",
        action=_RenamedFlag,
        new="--parallel",
        metavar="N",
        help="the old name of --parallel: now an error that names it",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the Ray cluster to join (auto, or HOST:PORT) instead of starting a local Ray; "
        "its CPUs decide how many runs go at once",
    )
    parser.add_argument(
        "--gpus-per-run",
        type=float,
        metavar="F",
        help="with --backend ray: GPUs each run asks Ray for, a fraction to share one (0.25: four runs a GPU); "
        "the run trains on the GPU Ray gives it (default: none, CPUs only)",
    )


def run(args: argparse.Namespace) -> int:
    if args.check_docs is not None:
        page = Path(args.check_docs)
        if not page.is_file():
            print(f"edgefd reproduce: --check-docs: no page {page} (run from the repository's root)", file=sys.stderr)
            return 2
        return check_docs(page)
    if args.recipe is None:
        print(
            "edgefd reproduce: give a RECIPE (or --check-docs); `edgefd reproduce --help` lists them", file=sys.stderr
        )
        return 2
    recipe = RECIPES[args.recipe]
    if args.threads is not None and args.threads < 1:
        print(f"edgefd reproduce: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return 2
    cluster, refusal = cluster_of(args)
    if refusal is not None:
        print(f"edgefd reproduce: {refusal}", file=sys.stderr)
        return 2
    try:
        return _run(args, recipe, cluster)
    except NoRay as error:
        print(f"edgefd reproduce: {error}", file=sys.stderr)
        return 2


def cluster_of(args: argparse.Namespace) -> tuple[Cluster | None, str | None]:
    """Where the runs go (None: in this process, one after another), or why the flags cannot say."""
    if args.backend != "ray":
        if args.parallel is not None or args.ray_address is not None or args.gpus_per_run is not None:
            return None, "--parallel, --ray-address and --gpus-per-run are for --backend ray"
        return None, None
    if args.parallel is not None and args.parallel < 1:
        return None, f"--parallel must be >= 1, got {args.parallel}"
    gpus = args.gpus_per_run or 0.0
    if not (math.isfinite(gpus) and gpus >= 0) or (gpus > 1 and not gpus.is_integer()):
        return None, f"--gpus-per-run must be a fraction of one GPU or a whole number of GPUs, got {args.gpus_per_run}"
    return Cluster(parallel=args.parallel or Cluster.parallel, address=args.ray_address, gpus_per_run=gpus), None


def _run(args: argparse.Namespace, recipe: Recipe, cluster: Cluster | None) -> int:
    if args.verify is not None:
        page = Path(args.verify)
        if not page.is_file():
            print(f"edgefd reproduce: --verify: no page {page} (run from the repository's root)", file=sys.stderr)
            return 2
        print(f"{recipe.name}: {verify_rule(recipe, page)}")
        differences = verify(recipe, page, tuple(args.seeds or recipe.seeds[:1]), Path(args.out) / "verify", cluster)
        for line in differences:
            print(line)
        print(
            f"{recipe.name}: {len(differences)} value(s) differ from {page}"
            if differences
            else f"{recipe.name}: every value is the one in {page}"
        )
        return 1 if differences else 0
    seeds = tuple(args.seeds or recipe.seeds)
    docs_page = Path(args.write_docs) if args.write_docs is not None else None
    if docs_page is not None:
        if args.rounds is not None and args.rounds != recipe.base.rounds:
            print("edgefd reproduce: --write-docs writes the recipe's own table: drop --rounds", file=sys.stderr)
            return 2
        if not docs_page.is_file():
            print(
                f"edgefd reproduce: --write-docs: no page {docs_page} (run from the repository's root)",
                file=sys.stderr,
            )
            return 2
        try:
            results_page.check_markers(docs_page, recipe.name)
        except ValueError as error:
            print(f"edgefd reproduce: {error}", file=sys.stderr)
            return 2
    table = run_recipe(recipe, Path(args.out), seeds, args.rounds, args.rerun, args.threads, cluster)
    print(table)
    if docs_page is not None:
        command = command_text(recipe, seeds, args.rounds, args.threads) + " --write-docs"
        revision = results_page.code_revision(Path(__file__).resolve().parents[2])
        threads = args.threads or recipe.base.threads
        text = results_page.block_text(command, revision, threads, table, results_page.numeric_platform())
        results_page.write_block(docs_page, recipe.name, text)
        write_record(docs_page, recipe.name, table_record(recipe))
        print(f"wrote the table into {docs_page} (revision {revision}) and its record into {records_path(docs_page)}")
    return 0
