"""Capture paths and the filters every one of them goes through.

``filters`` (enabled switches, session exclusions, repeat interval, redaction: :func:`apply_filters`),
``chunker`` (200-word chunks with 50-word overlap), ``watcher`` (Markdown files), and the other
capture paths (MCP middleware and proxy, conversation learning) built on them. Submodules are
imported explicitly; this package imports nothing so that hook processes stay fast.
"""
