"""Datasets (offline ones first) and non-IID partitioners for federated simulations.

ds = load_dataset("fmnist")
splits = partition(ds, num_clients=10, scheme="dirichlet:0.5", seed=0)
x, y = ds.train_x[splits[0].train_indices], ds.train_y[splits[0].train_indices]
"""

from .dataset import Dataset, DatasetNotFoundError
from .partition import ClientSplit, PartitionConfig, label_counts, parse_scheme, partition, partition_labels
from .plot import plot_label_counts
from .registry import DatasetInfo, clear_cache, default_data_root, list_datasets, load_dataset

__all__ = [
    "ClientSplit",
    "Dataset",
    "DatasetInfo",
    "DatasetNotFoundError",
    "PartitionConfig",
    "clear_cache",
    "default_data_root",
    "label_counts",
    "list_datasets",
    "load_dataset",
    "parse_scheme",
    "partition",
    "partition_labels",
    "plot_label_counts",
]
