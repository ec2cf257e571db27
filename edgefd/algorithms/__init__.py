"""Federated methods: one module (or package) per method, each holding its client role and its server role.

Every module of this package that calls :func:`edgefd.algorithms.base.register` is imported
here, so adding a method is adding a file. Look methods up with :func:`get_method`.
"""

import importlib
import pkgutil

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

_NOT_METHODS = {"base", "describe", "toolkit"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_METHODS and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

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
