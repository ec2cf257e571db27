"""Hashes in clusters, labelled: what FedCache's neighbour search is tested on."""

import numpy as np


def clustered(n_per_class=300, classes=5, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes * 4, dim)) * 3
    labels = np.repeat(np.arange(classes), n_per_class)
    sub = rng.integers(0, 4, size=len(labels))
    hashes = centres[labels * 4 + sub] + rng.normal(size=(len(labels), dim))
    return hashes.astype(np.float32), labels
