"""FedCache (Wu et al., IEEE TMC 2024): a server-side cache of per-sample knowledge.

The parts, from the top:

``method``      the client and server roles, the params and the registration (`edgefd methods fedcache`);
``cache``       the server's knowledge cache and the hnswlib / exact relation search, with the
                on-disk store of neighbour tables;
``hash_cache``  the on-disk store of sample hashes, keyed by sample content and encoder;
``encoders``    the frozen hash encoders (pixels, random projection, MobileNetV3-Small, ONNX).
"""

from edgefd.algorithms.fedcache.method import (
    FedCacheClient,
    FedCacheParams,
    FedCacheServer,
    fedcache_loss,
    hash_function,
    relation_store,
)

__all__ = ["FedCacheClient", "FedCacheParams", "FedCacheServer", "fedcache_loss", "hash_function", "relation_store"]
