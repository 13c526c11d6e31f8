"""Learning from what the agent sees and hears: conversation turns, user corrections,
configuration changes, workflows, search confirmations; suggestions and failure warnings.

Every capture point works without an LLM (rules, the default); an optional OpenAI-compatible
chat endpoint (:mod:`remindful.services.learning.llm`) can replace the rules per capture point. Each
capture publishes :class:`~remindful.services.learning.bus.MemoryCaptured` on the in-process bus and
counts itself in the metrics shown by ``stats().learning``.

Submodules are imported explicitly (``from remindful.services.learning.conversation import ...``).
Each function takes the store's write path (:class:`~remindful.services.learning.common.MemoryWriter`:
validated, redacted) and the repositories it reads and counts with
(:class:`~remindful.engine.repositories.LearningRepository`, ``MemoryRepository``); the manager's
``capture_*`` / ``confirm`` / ``suggest`` methods delegate to them.
"""
