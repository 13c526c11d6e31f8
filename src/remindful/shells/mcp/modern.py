"""The 2026-07-28 protocol era: which of its requests the fronts answer before the SDK is up.

Why: the ``mcp`` SDK 2.x client connects in ``mode="auto"`` by default. It first sends
``server/discover``; when the answer names a modern version it skips the ``initialize``
handshake and sends every request in the *modern era*: the protocol version, client info and
capabilities ride in each request's ``params._meta`` (the envelope) and, over HTTP, also in the
``MCP-Protocol-Version`` / ``Mcp-Method`` headers. A front answering only the handshake early
left such a client waiting for the SDK import.

How the SDK serves the era (mcp 2.3: ``mcp/server/runner.py``, ``_streamable_http_modern.py``):

- stdio: the connection's first request decides the era, once. An enveloped request other than
  ``initialize`` opens a modern connection (a later ``initialize`` is refused); anything else a
  legacy one (a later enveloped request is refused). See :func:`opening_era`.
- HTTP: routed by header alone: an ``MCP-Protocol-Version`` that is not a handshake version goes
  to a sessionless single-exchange entry, one POST in, one JSON answer out (``application/json``
  for a request that completes at once; no ``Mcp-Session-Id``). See :func:`http_answer`.

Either way each request stands alone: an envelope version the server does not serve gets the
-32022 UNSUPPORTED_PROTOCOL_VERSION error naming the served ones, and ``server/discover`` and
``tools/list`` at a served version depend on that version only (not on the client's info or
capabilities). So both are answered early from the manifest — the SDK's own answers, recorded by
:mod:`remindful.shells.mcp.manifest` — but only in their plainest shape (:func:`plain_request`);
anything else waits for the SDK.

Standard library only: this runs before the SDK is imported.
"""

from __future__ import annotations

from remindful.shells.mcp import manifest as mcp_manifest

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this runs before the SDK import, at every start
if TYPE_CHECKING:
    from typing import Any

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
INFO_KEY = "io.modelcontextprotocol/clientInfo"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: As ``mcp_types`` names them (the manifest generator checks they still are).
ENVELOPE_KEYS = (VERSION_KEY, INFO_KEY, CAPABILITIES_KEY)
EARLY_METHODS = ("server/discover", "tools/list")
#: The HTTP headers the SDK refuses when repeated (``find_duplicated_routing_header``).
ROUTING_HEADERS = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")


def envelope(version: str, client_info: dict[str, Any] | None, capabilities: dict[str, Any]) -> dict[str, Any]:
    """A request's ``_meta`` envelope, as the SDK client stamps it."""
    meta: dict[str, Any] = {VERSION_KEY: version}
    if client_info is not None:
        meta[INFO_KEY] = client_info
    meta[CAPABILITIES_KEY] = capabilities
    return meta


def has_envelope(params: Any) -> bool:
    """Whether the SDK routes a request with these params to the modern era (the version key alone)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_KEY in meta


def opening_era(message: Any) -> str | None:
    """The era a stdio connection's first request opens: "modern", "legacy", or "unknown" for a
    request the SDK might parse differently than we do (then nothing more is answered early).
    None if ``message`` is not a request (a notification or a bad line does not decide)."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    request_id, method, params = message["id"], message["method"], message.get("params")
    if (
        message.get("jsonrpc") != "2.0"
        or not set(message) <= {"jsonrpc", "id", "method", "params"}
        or (not isinstance(request_id, str) and type(request_id) is not int)
        or not isinstance(method, str)
        or not isinstance(params, dict | None)
    ):
        return "unknown"
    return "modern" if method != "initialize" and has_envelope(params) else "legacy"


def plain_request(message: Any) -> tuple[str, str] | None:
    """``(method, envelope version)`` of a ``server/discover`` or ``tools/list`` request whose
    params are a plain envelope and nothing else (no cursor, no log level), its client info a
    name, version and optional title (the SDK validates more, and refuses more), else None."""
    if opening_era(message) != "modern" or message["method"] not in EARLY_METHODS:
        return None
    params = message["params"]
    meta = params["_meta"]
    if set(params) != {"_meta"} or not {VERSION_KEY, CAPABILITIES_KEY} <= set(meta) <= set(ENVELOPE_KEYS):
        return None
    version, capabilities = meta[VERSION_KEY], meta[CAPABILITIES_KEY]
    info = meta.get(INFO_KEY, {"name": "", "version": ""})
    if not isinstance(version, str) or not isinstance(capabilities, dict):
        return None
    if not all(isinstance(v, dict) for v in capabilities.values()):
        return None
    if not isinstance(info, dict) or not {"name", "version"} <= set(info) <= {"name", "version", "title"}:
        return None
    if not all(isinstance(v, str) for v in info.values()):
        return None
    return message["method"], version


def answer(manifest: dict[str, Any], method: str, version: str) -> dict[str, Any] | None:
    """``{"result": ...}`` or ``{"error": ...}``: the SDK's answer to a plain request at an envelope
    ``version``, or None if the manifest does not hold it."""
    if version not in manifest["modern_versions"]:
        return {"error": mcp_manifest.unsupported_error(manifest, version)}
    if method == "server/discover":
        result = mcp_manifest.discover_answer(manifest, version)
    else:
        result = mcp_manifest.tools_answer(manifest, version)
    return None if result is None else {"result": result}


def http_answer(
    manifest: dict[str, Any], headers: list[tuple[bytes, bytes]], message: Any
) -> tuple[int, list[tuple[bytes, bytes]], list[dict[str, Any]]] | None:
    """The SDK's single-exchange answer (status, headers, body messages) to a modern-era POST that
    already passed the transport checks (Host, Origin, Content-Type, Accept), or None."""
    plain = plain_request(message)
    if plain is None:
        return None
    method, version = plain
    if any(sum(1 for k, _ in headers if k == name) > 1 for name in ROUTING_HEADERS):
        return None
    routing = {k: v.decode("latin-1") for k, v in headers if k in ROUTING_HEADERS}
    if routing.get(b"mcp-protocol-version") != version or routing.get(b"mcp-method") != method:
        return None  # the SDK's HEADER_MISMATCH
    if version in manifest["handshake_versions"]:
        return None  # routed to the handshake era: not this entry
    answered = answer(manifest, method, version)
    if answered is None:
        return None
    if "result" in answered:
        status, line = 200, mcp_manifest.render(message["id"], answered["result"], ascii_only=True)
    else:
        status, line = 400, mcp_manifest.render_error(message["id"], answered["error"], ascii_only=True)
    body = line.encode("utf-8")
    out = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    return status, out, [{"type": "http.response.body", "body": body}]
