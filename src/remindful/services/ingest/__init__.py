"""Ingest: everything that turns what an agent does into memories, and the gate it all goes through.

The modules, by idea (each imports only the ones above it, the engine and the lower layers):

- ``filters``: the capture filters every path passes (switches, session exclusions, repeat
  window, redaction: :func:`~remindful.services.ingest.filters.apply_filters`);
- ``chunker``: 200-word chunks with a 50-word overlap (Markdown files, long answers);
- ``ports``: what the package needs of the store (:class:`~remindful.services.ingest.ports.CaptureStore`);
- ``distill``: one tool call of a coding agent → one line with its outcome;
- ``events``: a coding agent's hook JSON → a spool record;
- ``hooks``: that record filtered, redacted and committed to the spool (what a hook process runs);
- ``relate``: what a newly stored call makes out of date (reads of a file edited since, replaced
  values) or resolves (earlier failures of the same call);
- ``calls``: one completed MCP tool call and the memory it becomes;
- ``spooled``: tool calls committed to the spool before they are stored (they survive ``kill -9``);
- ``worker``: stores captured calls from a background thread;
- ``middleware`` and ``proxy``: the two capture points of MCP tool calls (in-process, and around a
  stdio server);
- ``drainer``: the spool → memories, exactly once, one per tool call; the explicit step of whoever
  owns the store;
- ``watcher``: Markdown files of watched directories, kept current;
- ``install``: writes the hooks into Claude Code's settings.

The spool's statements are the engine's (:mod:`remindful.engine.spool`), and so is every other
query of the package (:class:`remindful.engine.captures.CaptureRepository`); the hook process is a
shell (:mod:`remindful.shells.hook`). Submodules are imported explicitly; this package imports
nothing, so that hook processes stay fast.
"""
