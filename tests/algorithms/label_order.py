"""A dataset with its samples stored sorted by label, as some real datasets are on disk."""

from __future__ import annotations

import dataclasses

import torch


def label_ordered(dataset):
    """The same dataset with its train and test samples stored sorted by label."""
    train, test = torch.argsort(dataset.train_y, stable=True), torch.argsort(dataset.test_y, stable=True)
    return dataclasses.replace(
        dataset,
        train_x=dataset.train_x[train],
        train_y=dataset.train_y[train],
        test_x=dataset.test_x[test],
        test_y=dataset.test_y[test],
        train_groups=None if dataset.train_groups is None else dataset.train_groups[train],
        test_groups=None if dataset.test_groups is None else dataset.test_groups[test],
    )
