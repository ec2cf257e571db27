"""Federated methods: one module per method, each holding its client role and its server role.

Importing this package registers every method; look them up with
:func:`edgefd.algorithms.base.get_method`.
"""

from edgefd.algorithms import fd, fedavg, local  # noqa: F401  (registration side effects)
from edgefd.algorithms.base import (
    ClientContext,
    ClientData,
    ClientRole,
    MethodSpec,
    ServerContext,
    ServerRole,
    get_method,
    list_methods,
)

__all__ = [
    "ClientContext",
    "ClientData",
    "ClientRole",
    "MethodSpec",
    "ServerContext",
    "ServerRole",
    "get_method",
    "list_methods",
]
