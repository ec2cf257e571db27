"""Datasets (offline ones first) and non-IID partitioners for federated simulations.

ds = load_dataset("fmnist")
splits = partition(ds, num_clients=10, scheme="dirichlet:0.5", seed=0)
x, y = ds.train_x[splits[0].train_indices], ds.train_y[splits[0].train_indices]

Your own data: load_dataset("npz:~/mydata.npz"), or register_dataset(DatasetSpec(...)) for a loader
of your own, which can build its Dataset with dataset_from_arrays (docs/ADDING_A_DATASET.md).
"""

from .dataset import Dataset, DatasetNotFoundError
from .npz import dataset_from_arrays
from .partition import ClientSplit, PartitionConfig, label_counts, parse_scheme, partition, partition_labels
from .plot import plot_label_counts
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
