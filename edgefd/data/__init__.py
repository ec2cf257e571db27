"""Datasets (offline ones first) and non-IID partitioners for federated simulations.

ds = load_dataset("fmnist")
splits = partition(ds, num_clients=10, scheme="dirichlet:0.5", seed=0)
x, y = ds.train_x[splits[0].train_indices], ds.train_y[splits[0].train_indices]

Your own data: load_dataset("npz:~/mydata.npz"), or register_dataset(DatasetSpec(...)) for a loader
of your own, which can build its Dataset with dataset_from_arrays (docs/ADDING_A_DATASET.md).
"""

import importlib
from typing import TYPE_CHECKING, Any

# `partition` is also a module of this package: imported here, its function is what the name means.
from .partition import ClientSplit, PartitionConfig, label_counts, parse_scheme, partition, partition_labels
from .plot import plot_label_counts

if TYPE_CHECKING:
    from .dataset import Dataset, DatasetNotFoundError
    from .npz import dataset_from_arrays
    from .registry import (
        DatasetInfo,
        DatasetSpec,
        clear_cache,
        dataset_label,
        default_data_root,
        list_datasets,
        load_dataset,
        register_dataset,
        unregister_dataset,
    )

# The loaders import torch, and `edgefd partition --help` or `edgefd server --help` must not wait for
# it: their names are imported from their modules on first use (`__getattr__` below).
_MODULES = {
    "dataset": ("Dataset", "DatasetNotFoundError"),
    "npz": ("dataset_from_arrays",),
    "registry": (
        "DatasetInfo",
        "DatasetSpec",
        "clear_cache",
        "dataset_label",
        "default_data_root",
        "list_datasets",
        "load_dataset",
        "register_dataset",
        "unregister_dataset",
    ),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "ClientSplit",
    "Dataset",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetSpec",
    "PartitionConfig",
    "clear_cache",
    "dataset_from_arrays",
    "dataset_label",
    "default_data_root",
    "label_counts",
    "list_datasets",
    "load_dataset",
    "parse_scheme",
    "partition",
    "partition_labels",
    "plot_label_counts",
    "register_dataset",
    "unregister_dataset",
]


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
