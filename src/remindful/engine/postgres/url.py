"""A catalog URL as it may be shown: in logs, errors, ``doctor``, ``remindful config``, settings
pages. Standard library only (the CLI's ``config`` imports it)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def shown_url(url: str) -> str:
    """``url`` fit to be shown (logs, doctor, settings pages, errors): its password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


__all__ = ["shown_url"]
