"""Every query the services need, behind a named method: one repository per aggregate.

=========================  =====================================================================
``memories``               :class:`~.memories.MemoryRepository`: rows and vectors by id, ids to walk
                           over, export pages, imports, the learning layer's metadata lookups
``sessions``               :class:`~.sessions.SessionRepository`: spans, counts per type, activity,
                           deletion, lengths
``stats``                  :class:`~.stats.StatsRepository`: the counts of ``stats()`` the others
                           do not answer
``learning``               :class:`~.learning.LearningRepository`: counters and reinforcements
``retention``              :class:`~.retention.RetentionRepository`: what retention and dedup read
                           and record
``captures``               :class:`~remindful.engine.captures.CaptureRepository`: the spool, the capture filters'
                           counts, tool-call lookups, the watcher's files, tombstones
``ledger``                 :class:`~.ledger.LedgerRepository`: the context injected into agents
``brief``                  :class:`~.brief.BriefRepository`: what a new session is told first
``scopes``                 :class:`~.scopes.ScopeRepository`: what each scope holds, the projects
=========================  =====================================================================

The SQL lives here, in :mod:`remindful.engine.catalog` (the rows, the deletes and their queues, the
audit log, the session upsert) and in the rest of the engine; nothing above the engine writes any
(``tests/test_architecture.py``). The composition root builds the repositories once
(:meth:`Repositories.over`) and hands each service the ones it uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from remindful.engine.captures import CaptureRepository
from remindful.engine.catalog import Catalog, CatalogSource
from remindful.engine.repositories.brief import BriefRepository
from remindful.engine.repositories.learning import LearningRepository
from remindful.engine.repositories.ledger import LedgerRepository
from remindful.engine.repositories.memories import MemoryRepository
from remindful.engine.repositories.retention import RetentionRepository
from remindful.engine.repositories.scopes import ScopeRepository
from remindful.engine.repositories.sessions import SessionRepository
from remindful.engine.repositories.stats import StatsRepository


@dataclass(frozen=True, slots=True)
class Repositories:
    """One of each repository over one catalog."""

    memories: MemoryRepository
    sessions: SessionRepository
    stats: StatsRepository
    learning: LearningRepository
    retention: RetentionRepository
    captures: CaptureRepository
    ledger: LedgerRepository
    brief: BriefRepository
    scopes: ScopeRepository

    @classmethod
    def over(cls, catalog: Catalog | CatalogSource) -> Repositories:
        """Every repository over ``catalog`` (an open one, or how to reach it: see :mod:`.base`)."""
        return cls(
            memories=MemoryRepository(catalog),
            sessions=SessionRepository(catalog),
            stats=StatsRepository(catalog),
            learning=LearningRepository(catalog),
            retention=RetentionRepository(catalog),
            captures=CaptureRepository(catalog),
            ledger=LedgerRepository(catalog),
            brief=BriefRepository(catalog),
            scopes=ScopeRepository(catalog),
        )


__all__ = [
    "BriefRepository",
    "CaptureRepository",
    "LearningRepository",
    "LedgerRepository",
    "MemoryRepository",
    "Repositories",
    "RetentionRepository",
    "ScopeRepository",
    "SessionRepository",
    "StatsRepository",
]
