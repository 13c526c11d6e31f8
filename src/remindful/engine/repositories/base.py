"""What every repository is: named queries over one catalog, reached when a query runs.

A repository is built once, by the composition root (:class:`remindful.api.MemoryManager`), from a
:data:`~remindful.engine.catalog.CatalogSource`: the catalog is asked for at each query, so a
repository outlives a restore (which closes the catalog and reopens the swapped-in file) and a
store that opens on first use stays lazy. A test may pass an open :class:`Catalog` instead.
"""

from __future__ import annotations

from remindful.engine.catalog import Catalog, CatalogSource


class Repository:
    """Named queries over the catalog ``catalog`` gives (or is)."""

    def __init__(self, catalog: Catalog | CatalogSource) -> None:
        self._source: CatalogSource = (lambda: catalog) if isinstance(catalog, Catalog) else catalog

    @property
    def _catalog(self) -> Catalog:
        """The open catalog (opening the store if needed; MemoryDisabledError when memory is off)."""
        return self._source()
