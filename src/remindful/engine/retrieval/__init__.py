"""Retrieval: the memories that answer a query, best first, each with a calibrated score.

- :mod:`~remindful.engine.retrieval.search`: the pipeline (candidates from each space, fusion,
  boosts, re-ranking, near-duplicates, the relevance floor);
- :mod:`~remindful.engine.retrieval.rerank`: the fitted re-ranking model of the first candidates;
- :mod:`~remindful.engine.retrieval.diversity`: near-duplicates collapsed, newer versions first;
- :mod:`~remindful.engine.retrieval.calibration`: the absolute relevance each hit is scored with.

Retrieval holds no state and no SQL: it reads through the catalog's methods (lexical matches, rows
passing a filter, stored vectors, session neighbourhoods) and a dense query over the vector index
that the :class:`~remindful.engine.mirror.IndexMirror` hands it. Every setting of a search arrives
as an argument; the defaults are the API's (:meth:`remindful.api.MemoryManager.search`).
"""
