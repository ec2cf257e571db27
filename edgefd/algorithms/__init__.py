"""Federated methods: one module (or package) per method, each holding its client role and its server role.

Every module of this package that calls :func:`edgefd.algorithms.base.register_method` is imported
on the first look-up (:func:`get_method`, :func:`list_methods`), so adding a method is adding a file.
Importing this package alone imports no method: the methods import torch, which `edgefd --help`
must not wait for.
"""

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgefd.algorithms.base import (
        ClientContext,
        ClientData,
        ClientRole,
        MethodSpec,
        ServerContext,
        ServerRole,
        get_method,
        list_methods,
        register_method,
        unregister_method,
    )

_NOT_METHODS = {"base", "describe", "params", "toolkit"}


def import_methods() -> None:
    """Imports every method module of this package (each registers its method)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _NOT_METHODS and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


__all__ = [
    "ClientContext",
    "ClientData",
    "ClientRole",
    "MethodSpec",
    "ServerContext",
    "ServerRole",
    "get_method",
    "import_methods",
    "list_methods",
    "register_method",
    "unregister_method",
]


def __getattr__(name: str) -> Any:
    # The names of `base`, imported on first use (base imports torch).
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
