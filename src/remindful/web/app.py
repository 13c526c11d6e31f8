"""The dashboard: server-rendered pages over the public API of one MemoryManager.

Pages: Overview (``/``), Memories (``/memories``: newest first or a hybrid search, filtered (by
scope too: every memory unless one is chosen) and paged), Memory (``/memories/{id}``: everything
about one memory, its attachments, bookmark and delete), Sessions (``/sessions``,
``/sessions/{id}``: resume, delete after a confirmation that names the automatic backup), Patterns
(``/patterns``) and Settings (``/settings``, read-only). Charts are
drawn by Chart.js, shipped in ``static/`` with its license: the pages work offline.

Every route runs behind :class:`remindful.web.gate.BearerGate` (the bearer token, or a signed-in
browser's session under its own path prefix; Host and Origin checks); every POST carries the CSRF
token. A signed-in browser sees the dashboard under ``/s/<random>`` (the request's ``root_path``):
every link, form and redirect starts with :func:`root` (``{{ root }}`` in a template), so none
leaves that prefix, and none can point to another host. Errors become pages with the status code
of :func:`remindful.errors.http_status`: bad input 400 naming the field and the expected form, an
unknown id 404, disabled memory 503.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import os
from collections.abc import Iterable
from datetime import UTC, datetime, time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from remindful.engine.attachments import attachments_dir
from remindful.errors import NotFoundError, RemindfulError, ValidationError, http_status
from remindful.model import MemorySource, MemoryType, Session
from remindful.web import formats
from remindful.web.gate import CSRF_FIELD, LOOPBACK_NAMES, BearerGate, CsrfTokens
from remindful.web.provenance import setting_rows, setting_sections

if TYPE_CHECKING:
    from remindful.api import MemoryManager

log = logging.getLogger("remindful")

HERE = Path(__file__).parent
PAGE_SIZE = 50
SESSIONS_PAGE = 50
SESSION_MEMORIES_PAGE = 100
#: Patterns are computed over at most this many newest action memories (the whole analysis runs
#: per request).
PATTERN_MEMORIES = 1_000
#: Rows shown per table on the Patterns page.
PATTERN_ROWS = 50
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"}


def build_app(manager: MemoryManager, token: str, *, hosts: Iterable[str] = LOOPBACK_NAMES) -> BearerGate:
    """The whole dashboard as one ASGI app, behind the bearer ``token`` of the store (the gate of
    every HTTP surface, :class:`~remindful.web.gate.BearerGate`), which browsers enter with the
    one-time codes of its ``sign_ins``. ``hosts`` are the names browsers may use for the server
    (loopback by default)."""
    return BearerGate(dashboard_app(manager), token, hosts=hosts, browser=True)


def dashboard_app(manager: MemoryManager) -> Starlette:
    """The dashboard's pages without a gate: for a server that puts its own in front (the daemon
    mounts it at ``/``)."""
    dashboard = Dashboard(manager)
    routes = [
        Route("/", dashboard.overview, name="overview"),
        Route("/memories", dashboard.memories, name="memories"),
        Route("/memories/{memory_id}", dashboard.memory, name="memory"),
        Route("/memories/{memory_id}/bookmark", dashboard.bookmark, methods=["POST"], name="bookmark"),
        Route("/memories/{memory_id}/delete", dashboard.delete_memory, methods=["POST"], name="delete_memory"),
        Route("/memories/{memory_id}/attachments/{key}", dashboard.attachment, name="attachment"),
        Route("/sessions", dashboard.sessions, name="sessions"),
        Route("/sessions/{session_id}", dashboard.session, name="session"),
        Route("/sessions/{session_id}/resume", dashboard.resume_session, methods=["POST"], name="resume_session"),
        Route("/sessions/{session_id}/delete", dashboard.delete_session, methods=["GET", "POST"], name="delete"),
        Route("/patterns", dashboard.patterns, name="patterns"),
        Route("/settings", dashboard.settings, name="settings"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: dashboard.http_error,
            RemindfulError: dashboard.remindful_error,
        },
    )


class Dashboard:
    """The page handlers; each is about one call of the manager's public API."""

    def __init__(self, manager: MemoryManager) -> None:
        self.manager = manager
        # The dashboard's user is one client of a manager the daemon shares with others (hooks,
        # MCP clients): the session resumed here ranks higher in the dashboard's searches only.
        self.resumed: str | None = None
        self.csrf = CsrfTokens()
        env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
        env.filters["when"] = _when
        env.filters["short"] = _short
        env.filters["tojson_attr"] = lambda v: json.dumps(v, ensure_ascii=False)
        for name in ("count", "num", "ms", "minutes", "plural"):
            env.filters[name] = getattr(formats, name)
        self.templates = Jinja2Templates(env=env)

    def page(self, request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
        context |= {"csrf_field": CSRF_FIELD, "csrf": self.csrf.value, "nav": name.split(".")[0], "root": root(request)}
        return self.templates.TemplateResponse(request, name, context, status_code=status_code)

    # -- errors ---------------------------------------------------------------------------------

    def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.page(request, "error.html", exc.status_code, title=f"Error {exc.status_code}", message=exc.detail)

    def remindful_error(self, request: Request, exc: Exception) -> Response:
        status = http_status(exc)
        if status >= 500:
            log.warning("dashboard: %s %s failed: %s", request.method, request.url.path, exc)
        return self.page(request, "error.html", status, title=f"Error {status}", message=str(exc))

    async def form(self, request: Request) -> dict[str, str]:
        """The submitted form, after its CSRF token was checked (403 without it)."""
        form = await request.form()
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        if not self.csrf.ok(values.get(CSRF_FIELD)):
            raise HTTPException(403, "The form's CSRF token is missing or wrong: reload the page and try again.")
        return values

    # -- pages ----------------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        stats = self.manager.stats()
        charts = {
            "per_day": stats.captures_per_day or [],
            "by_type": {name.removesuffix("_memories"): c.count for name, c in stats.collections.items()},
        }
        # The page shows the JSON form, which leaves out what a full disk kept from being read.
        return self.page(request, "overview.html", stats=stats.to_dict(), charts=charts)

    def memories(self, request: Request) -> Response:
        q = request.query_params
        filters = MemoryFilters.parse(q)
        page = _int(q.get("page"), "page", 0, 10**7)
        query = (q.get("q") or "").strip()
        hits = []
        memories = []
        has_next = False
        if query:
            hits = self.manager.search(
                query,
                types=[filters.type] if filters.type else None,
                limit=PAGE_SIZE,
                filters={"source": filters.source} if filters.source else None,
                session_id=filters.session or None,
                since=filters.since,
                until=filters.until,
                resumed_session=self.resumed,
                scope=filters.scope or "all",
            )
        else:
            found = filters.listing(self.manager, PAGE_SIZE + 1, page * PAGE_SIZE)
            memories, has_next = found[:PAGE_SIZE], len(found) > PAGE_SIZE
        base = {**filters.params(), **({"q": query} if query else {})}
        return self.page(
            request,
            "memories.html",
            filters=filters,
            query=query,
            hits=hits,
            memories=memories,
            page=page,
            prev_url=_url(request, "/memories", base | {"page": page - 1}) if page > 0 else None,
            next_url=_url(request, "/memories", base | {"page": page + 1}) if has_next else None,
            types=[t.value for t in MemoryType],
            sources=[s.value for s in MemorySource],
            scopes=self.manager.scopes(),
        )

    def memory(self, request: Request) -> Response:
        memory = self.manager.get(request.path_params["memory_id"])
        return self.page(request, "memory.html", memory=memory, attachments=self._attachments(request, memory))

    async def bookmark(self, request: Request) -> Response:
        await self.form(request)
        memory = self.manager.get(request.path_params["memory_id"])
        change = {"bookmarked": True} if not memory.bookmarked else {"bookmarked": False, "manual_save": None}
        self.manager.update(memory.id, metadata=change)
        return _redirect(request, f"/memories/{quote(memory.id, safe='')}")

    async def delete_memory(self, request: Request) -> Response:
        await self.form(request)
        memory_id = request.path_params["memory_id"]
        if not self.manager.delete(memory_id):
            raise NotFoundError(memory_id)
        return _redirect(request, _url(request, "/memories", {"deleted": memory_id}, rooted=False))

    def attachment(self, request: Request) -> Response:
        """An attachment copy of the memory, only from ``<storage>/attachments/<id>/`` (a path
        elsewhere, or one that leads out of there through a link, is 404)."""
        memory = self.manager.get(request.path_params["memory_id"])
        key = request.path_params["key"]
        found = {a["key"]: a for a in self._attachments(request, memory)}.get(key)
        if found is None or not found["served"]:
            raise HTTPException(404, f"Memory {memory.id} has no attachment {key!r} stored in the memory store.")
        path = Path(found["path"])
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        inline = path.suffix.lower() in IMAGE_SUFFIXES
        return FileResponse(
            path,
            media_type=media_type if inline else "application/octet-stream",
            filename=path.name,
            content_disposition_type="inline" if inline else "attachment",
        )

    def _attachments(self, request: Request, memory: Any) -> list[dict[str, Any]]:
        keys = dict.fromkeys(["screenshot_path", *self.manager.settings.attachments.path_keys])
        folder = attachments_dir(self.manager.path).resolve() / memory.id
        prefix = f"{root(request)}/memories/{quote(memory.id, safe='')}/attachments"
        out = []
        for key in keys:
            value = memory.metadata.get(key)
            if not isinstance(value, str) or not value:
                continue
            served = _inside(Path(value), folder)
            out.append(
                {
                    "key": key,
                    "path": str(Path(value).resolve()) if served else value,
                    "served": served,
                    "image": served and Path(value).suffix.lower() in IMAGE_SUFFIXES,
                    "url": f"{prefix}/{quote(key, safe='')}" if served else None,
                }
            )
        return out

    def sessions(self, request: Request) -> Response:
        page = _int(request.query_params.get("page"), "page", 0, 10**7)
        shown = self.manager.list_sessions(
            limit=SESSIONS_PAGE, offset=page * SESSIONS_PAGE, resumed_session=self.resumed
        )
        total = self.manager.session_count()
        return self.page(
            request,
            "sessions.html",
            sessions=shown,
            projects=self._projects([s.id for s in shown]),
            total=total,
            page=page,
            prev_url=_url(request, "/sessions", {"page": page - 1}) if page > 0 else None,
            next_url=_url(request, "/sessions", {"page": page + 1}) if total > (page + 1) * SESSIONS_PAGE else None,
            deleted=request.query_params.get("deleted"),
            backup=request.query_params.get("backup"),
        )

    def _projects(self, session_ids: list[str]) -> dict[str, dict[str, str]]:
        """``{session id: {"name", "scope", "root"}}``: where each session worked, told by the scope of
        its newest memory (a project's name and directory, ``user``, or ``unscoped``)."""
        known = {u.scope: u for u in self.manager.scopes()}
        out = {}
        for session_id in session_ids:
            newest = self.manager.list(session_id=session_id, limit=1, scope="all")
            scope = (newest[0].scope if newest else None) or "unscoped"
            usage = known.get(scope)
            name = (usage.name or usage.kind) if usage is not None else scope.removeprefix("project:")
            out[session_id] = {"name": name, "scope": scope, "root": (usage.root if usage else None) or ""}
        return out

    def _session(self, session_id: str) -> Session:
        found = self.manager.list_sessions(session_id=session_id, resumed_session=self.resumed)
        if not found:
            raise NotFoundError(session_id, kind="session")
        return found[0]

    def session(self, request: Request) -> Response:
        info = self._session(request.path_params["session_id"])
        page = _int(request.query_params.get("page"), "page", 0, 10**7)
        count = info.memory_count
        # The listing is newest first: the k-th memory in time order is at offset count - 1 - k.
        first = page * SESSION_MEMORIES_PAGE
        last = min(first + SESSION_MEMORIES_PAGE, count)
        memories = []
        if last > first:
            memories = self.manager.list(session_id=info.id, limit=last - first, offset=count - last)[::-1]
        here = f"/sessions/{quote(info.id, safe='')}"
        return self.page(
            request,
            "session.html",
            info=info,
            project=self._projects([info.id])[info.id],
            memories=memories,
            first_number=first + 1,
            prev_url=_url(request, here, {"page": page - 1}) if page > 0 else None,
            next_url=_url(request, here, {"page": page + 1}) if last < count else None,
            resumed=request.query_params.get("resumed"),
        )

    async def resume_session(self, request: Request) -> Response:
        await self.form(request)
        session_id = request.path_params["session_id"]
        self.manager.session_size(session_id)  # NotFoundError for a session without memories
        self.resumed = session_id
        here = f"/sessions/{quote(session_id, safe='')}"
        return _redirect(request, _url(request, here, {"resumed": 1}, rooted=False))

    async def delete_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if request.method == "GET":
            info = self._session(session_id)
            backups = Path(self.manager.path) / "backups"
            pattern = f"backup_{datetime.now(UTC):%Y%m%d}_HHMMSS_auto-before-delete-session.tar.gz"
            return self.page(request, "delete_session.html", info=info, backups=backups, backup_name=pattern)
        form = await self.form(request)
        result = self.manager.delete_session(session_id, confirm=form.get("confirm") == "yes")
        if self.resumed == session_id:
            self.resumed = None
        params = {"deleted": session_id, "backup": result.backup_path}
        return _redirect(request, _url(request, "/sessions", params, rooted=False))

    def patterns(self, request: Request) -> Response:
        report = self.manager.analyze_patterns(max_memories=PATTERN_MEMORIES)
        charts = {
            "kinds": [
                {"name": r["action"], "rate": r["success_rate"], "count": r["count"]} for r in report.by_kind or []
            ],
        }
        shown = {k: getattr(report, k) or [] for k in ("patterns", "failure_prone", "insights")}
        shown = {k: v[:PATTERN_ROWS] for k, v in shown.items()}
        return self.page(
            request,
            "patterns.html",
            report=report,
            shown=shown,
            charts=charts,
            window=PATTERN_MEMORIES,
            rows=PATTERN_ROWS,
        )

    def settings(self, request: Request) -> Response:
        sections = setting_sections(setting_rows(self.manager.settings))
        return self.page(request, "settings.html", sections=sections, storage=self.manager.path)


class MemoryFilters:
    """The Memories page's filters, parsed and checked from the query string."""

    def __init__(
        self,
        type: str,
        session: str,
        source: str,
        since: datetime | None,
        until: datetime | None,
        scope: str = "",
    ) -> None:
        self.type, self.session, self.source, self.since, self.until = type, session, source, since, until
        self.scope = scope  # "" for every scope; the manager checks the value

    @classmethod
    def parse(cls, q: Any) -> MemoryFilters:
        memory_type = (q.get("type") or "").strip()
        if memory_type and memory_type not in {t.value for t in MemoryType}:
            valid = ", ".join(t.value for t in MemoryType)
            raise ValidationError("type", f"expected one of {valid}, got {memory_type!r}")
        source = (q.get("source") or "").strip()
        if source and source not in {s.value for s in MemorySource}:
            valid = ", ".join(s.value for s in MemorySource)
            raise ValidationError("source", f"expected one of {valid}, got {source!r}")
        since = _day(q.get("since"), "since", end=False)
        until = _day(q.get("until"), "until", end=True)
        scope = (q.get("scope") or "").strip()
        return cls(memory_type, (q.get("session") or "").strip(), source, since, until, scope)

    def params(self) -> dict[str, str]:
        out = {"type": self.type, "session": self.session, "source": self.source, "scope": self.scope}
        out["since"] = self.since.date().isoformat() if self.since else ""
        out["until"] = self.until.date().isoformat() if self.until else ""
        return {k: v for k, v in out.items() if v}

    def listing(self, manager: MemoryManager, limit: int, offset: int) -> list[Any]:
        """The filtered memories newest first, ``limit`` of them from ``offset`` on."""
        return manager.list(
            self.type or None,
            self.session or None,
            limit,
            offset,
            source=self.source or None,
            since=self.since,
            until=self.until,
            scope=self.scope or "all",
        )


def _day(value: str | None, field: str, *, end: bool) -> datetime | None:
    """A ``YYYY-MM-DD`` (or ISO date-time) filter value as UTC; an end day means up to its last
    microsecond (a range includes both ends, as ``list`` and ``search`` take it)."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(field, f"expected a date like 2026-01-31, got {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if end and len(value) <= 10:
        parsed = datetime.combine(parsed.date(), time.max, UTC)
    return parsed


def _int(value: str | None, field: str, low: int, high: int) -> int:
    if value in (None, ""):
        return low
    try:
        number = int(value)
    except ValueError:
        raise ValidationError(field, f"expected a whole number from {low} to {high}, got {value!r}") from None
    if not low <= number <= high:
        raise ValidationError(field, f"expected a whole number from {low} to {high}, got {number}")
    return number


def root(request: Request) -> str:
    """The path prefix the dashboard is served under for this request: ``""``, or a signed-in
    browser's ``/s/<random>`` (set by the gate as the ``root_path``)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def local_target(target: str) -> str:
    """``target`` when it is a path on this server (one leading ``/``, no backslash, no control
    character: nothing a browser could read as another host, ``//evil.example`` or
    ``/\\evil.example``); ``/`` otherwise."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return "/"
    return target


def _redirect(request: Request, path: str) -> RedirectResponse:
    """303 to ``path`` (a path of the dashboard, checked by :func:`local_target`) under :func:`root`."""
    return RedirectResponse(root(request) + local_target(path), status_code=303)


def _url(request: Request, path: str, params: dict[str, Any], *, rooted: bool = True) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "", 0)}
    return (root(request) if rooted else "") + path + ("?" + urlencode(kept) if kept else "")


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is a regular file under ``root`` once every link is resolved."""
    try:
        resolved = path.expanduser().resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return resolved.is_relative_to(root) and resolved.is_file() and os.access(resolved, os.R_OK)


def _when(value: datetime | str | float | None) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, int | float):  # epoch seconds
        value = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(text: str, width: int = 140) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


__all__ = ["Dashboard", "build_app", "dashboard_app"]
