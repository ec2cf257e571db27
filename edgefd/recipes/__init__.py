"""The papers' small-scale recipes, as data: one module per paper (`edgefd.recipes.fedcache`, `dfl`,
`fedd2s`, `fedict`, `fedzkt`), each a dict of `Recipe` by name, on the types and checks of
`edgefd.recipes.recipe`. `edgefd reproduce` (`edgefd.reproduce`) runs, tabulates and verifies them.

A new recipe is an entry in its paper's module, with a place for its table in docs/RESULTS.md."""

from __future__ import annotations

from edgefd.recipes import dfl, fedcache, fedd2s, fedict, fedzkt
from edgefd.recipes.recipe import Arm, Recipe

RECIPES: dict[str, Recipe] = {
    **fedcache.RECIPES,
    **dfl.RECIPES,
    **fedd2s.RECIPES,
    **fedict.RECIPES,
    **fedzkt.RECIPES,
}
"""Every recipe by name, paper by paper."""

__all__ = ["RECIPES", "Arm", "Recipe"]
