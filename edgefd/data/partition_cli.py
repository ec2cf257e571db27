"""``edgefd partition``: show how a dataset would be split over clients, as a table and a plot.

``edgefd/cli.py`` owns the command line; it calls :func:`add_arguments` to build the sub-command
and :func:`run` to execute it. The dataset modules (and so torch) are imported only in ``run``,
to keep ``edgefd --help`` quick.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

EXIT_OK = 0
EXIT_USAGE = 2
"""Returned for a missing dataset or a bad option (argparse's code for usage errors)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``partition`` options to ``parser``."""
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        default="digits",
        help="dataset to split, by registry name: digits, mnist5k and watch are bundled, fmnist comes with "
        "scripts/install.sh, mnist, cifar10, svhn, ... are read from --data-root, npz:PATH is a file of your "
        "own; --list shows them all and which are here (default: %(default)s)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the datasets, and whether each is available here, then exit"
    )
    parser.add_argument(
        "--clients", type=int, metavar="N", default=10, help="number of clients to split across (default: %(default)s)"
    )
    parser.add_argument(
        "--partition",
        metavar="SCHEME",
        default="dirichlet:0.5",
        help="how to split: iid (equal random shares) | dirichlet:ALPHA (label skew, smaller ALPHA = more "
        "skewed, e.g. dirichlet:0.1) | shards:K (K classes per client) | quantity:ALPHA (size skew, labels "
        "IID) | natural (one client per subject / writer, e.g. with --dataset watch) | dominant:FRAC (FRAC "
        "of each client's samples from one label, e.g. dominant:0.8) (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, metavar="N", default=0, help="seed of the random split (default: %(default)s)"
    )
    parser.add_argument(
        "--data-root",
        metavar="DIR",
        default=None,
        help="folder holding on-disk datasets (default: $EDGEFD_DATA_ROOT or ~/.cache/edgefd/data)",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="let torchvision download a missing on-disk dataset into --data-root (bundled ones need nothing)",
    )
    parser.add_argument(
        "--test-fraction",
        type=float,
        metavar="FRAC",
        default=None,
        help="each client's local test split is FRAC times its train size, with the same label mix, e.g. 0.25 "
        "(default: share out the whole test set in proportion to the clients' sizes)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="also save a stacked bar chart of each client's label counts to FILE, e.g. labels.png (default: no plot)",
    )


def run(args: argparse.Namespace) -> int:
    """Partition, print the per-client table, optionally plot; 0 on success, 2 on a usage error."""
    from .dataset import DatasetNotFoundError
    from .partition import label_counts, partition
    from .plot import plot_label_counts
    from .registry import list_datasets, load_dataset

    if args.list:
        for info in list_datasets(args.data_root):
            print(f"{info.name:<16} {'available' if info.available else 'missing  '}  {info.description}")
        return EXIT_OK
    try:
        dataset = load_dataset(args.dataset, root=args.data_root, download=args.download)
        splits = partition(dataset, args.clients, args.partition, args.seed, test_fraction=args.test_fraction)
    except (DatasetNotFoundError, ValueError) as e:
        print(f"edgefd partition: error: {e}", file=sys.stderr)
        return EXIT_USAGE

    train = label_counts(dataset, splits, "train")
    test = label_counts(dataset, splits, "test")
    used = np.concatenate([s.train_indices for s in splits])
    print(
        f"{dataset.name}: {len(dataset.train_y)} train / {len(dataset.test_y)} test samples, "
        f"{dataset.num_classes} classes; partition {args.partition!r}, {len(splits)} clients, seed {args.seed}"
    )
    print(format_table(train, test.sum(axis=1), [s.group for s in splits]))
    shared = len(used) - len(np.unique(used))
    unused = len(dataset.train_y) - len(np.unique(used))
    if shared or unused:
        print(f"note: {shared} training samples are given to more than one client, {unused} to none")
    tested = int(test.sum())
    if args.test_fraction is None and tested < len(dataset.test_y):
        print(
            f"note: the clients' test splits hold {tested} of the {len(dataset.test_y)} test samples: each takes "
            "its labels' share, and no label is asked for more test samples than it has"
        )

    if args.plot:
        title = f"{dataset.name}, {args.partition}, {len(splits)} clients, seed {args.seed}"
        plot_label_counts(train, args.plot, title=title, class_names=dataset.class_names)
        print(f"plot saved to {args.plot}")
    return EXIT_OK


def format_table(train_counts: np.ndarray, test_sizes: np.ndarray, groups: list | None = None) -> str:
    """Rows of ``client  train  test | count per label``, plus a total row."""
    classes = train_counts.shape[1]
    width = max(4, len(str(int(train_counts.max(initial=0)))) + 1, len(str(classes - 1)) + 1)
    show_group = groups is not None and any(g is not None for g in groups)
    head = f"{'client':>6} " + (f"{'group':>5} " if show_group else "") + f"{'train':>6} {'test':>5} |"
    lines = [head + "".join(f"{c:>{width}}" for c in range(classes))]
    for k, (row, n_test) in enumerate(zip(train_counts, test_sizes)):
        group = f"{groups[k]:>5} " if show_group and groups is not None else ""
        lines.append(
            f"{k:>6} {group}{int(row.sum()):>6} {int(n_test):>5} |" + "".join(f"{int(v):>{width}}" for v in row)
        )
    total = train_counts.sum(axis=0)
    pad = " " * 6 if show_group else ""
    lines.append(
        f"{'total':>6} {pad}{int(total.sum()):>6} {int(np.sum(test_sizes)):>5} |"
        + "".join(f"{int(v):>{width}}" for v in total)
    )
    return "\n".join(lines)
