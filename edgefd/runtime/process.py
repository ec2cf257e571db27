"""How edgefd starts another edgefd process (deploy-local's server and clients, a recipe's isolated
run): with this interpreter, importing the edgefd this process imported.

``python -m edgefd.cli`` would put the working folder first on ``sys.path``: run from a checkout of
edgefd while edgefd is installed, every child imported the checkout instead, which has no compiled
kernels (they fell back to the torch references, and a deployed FedCache drifted from its
simulation) and may hold other code. The children here run as the ``edgefd`` console script does,
without the working folder on ``sys.path``.
"""

from __future__ import annotations

import sys

_MAIN = "import sys; sys.path[:] = [p for p in sys.path if p]; from {module} import main; sys.exit(main())"


def edgefd_command(*args: str, module: str = "edgefd.cli") -> list[str]:
    """The command line that runs ``module``'s ``main()`` with ``args`` in a new process."""
    return [sys.executable, "-c", _MAIN.format(module=module), *args]
