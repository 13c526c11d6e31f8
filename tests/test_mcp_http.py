"""MCP over streamable HTTP: the SDK's app on uvicorn behind the bearer token, spawned and driven by real clients.

Also the token itself (:mod:`remindful.services.access`) and the gate in front of the app, in-process.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.testclient import TestClient

from remindful.errors import StorageError
from remindful.services.access import TOKEN_ENV, bearer_ok, http_token, token_file
from remindful.shells.mcp.server import BearerGate, served_names, transport_security
from remindful.web.gate import UNAUTHORIZED
from test_mcp_e2e import errors_are_tool_errors, remindful_script, server_env, store_and_search

TOKEN = "test-token-0123456789"
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    port: int
    store: Path
    log: Path


@contextmanager
def spawned(tmp_path: Path, *args: str, token: str | None = TOKEN, name: str = "serve") -> Iterator[Served]:
    """`remindful serve --transport http` on a free port (``token``: $REMINDFUL_HTTP_TOKEN, or
    None for the token file); stopped with SIGTERM, which must end it cleanly (status 0)."""
    port = free_port()
    env = server_env(tmp_path)
    if token is not None:
        env[TOKEN_ENV] = token
    log = tmp_path / f"{name}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [remindful_script(), "serve", "--transport", "http", "--port", str(port), *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        started = time.monotonic()
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                    pytest.fail(f"remindful serve --transport http did not start: {log.read_text()}")
                time.sleep(0.02)
        yield Served(f"http://127.0.0.1:{port}/mcp", port, Path(env["MEMORY_STORAGE_PATH"]), log)
    finally:
        proc.terminate()
        try:
            status = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert status == 0, log.read_text()  # a clean exit on SIGTERM
    assert "Traceback" not in log.read_text(), log.read_text()


@asynccontextmanager
async def sdk_client(url: str, token: str = TOKEN, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's own client over streamable HTTP, sending the bearer token."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=120) as client:
            yield client


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}


def request(
    served: Served, headers: dict[str, str], body: dict[str, Any] | None = INITIALIZE, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP request to /mcp: status, headers (lower-cased names), body."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
        connection.request(method, "/mcp", body=None if body is None else json.dumps(body), headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- spawned servers --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_over_http(tmp_path: Path, mode: str) -> None:
    """tools/list, a store and search round trip, and tool errors, through the SDK's client in
    the handshake era (a session) and in its default auto mode (the sessionless 2026 era)."""
    with spawned(tmp_path) as served:
        async with sdk_client(served.url, mode=mode) as client:
            tools = await store_and_search(client)
            await errors_are_tool_errors(client)
    assert {"memory_store", "memory_search", "memory_clear_all"} <= set(tools)
    assert f"remindful MCP server on {served.url}" in served.log.read_text()


@pytest.mark.slow
@pytest.mark.integration
def test_requests_without_the_token_get_401_and_nothing_else(tmp_path: Path) -> None:
    with spawned(tmp_path) as served:
        refused = [
            request(served, {}),
            request(served, bearer("not-the-token")),
            request(served, bearer(TOKEN + "x")),
            request(served, {"Authorization": f"Basic {TOKEN}"}),
            request(served, {"Authorization": TOKEN}),
            request(served, {}, None, "GET"),
            request(served, {}, None, "DELETE"),
        ]
        for status, headers, body in refused:
            assert (status, body) == (401, UNAUTHORIZED.encode())
            assert headers["www-authenticate"] == 'Bearer realm="remindful"' and "mcp-session-id" not in headers
        status, headers, _ = request(served, {"Authorization": f"bearer {TOKEN}"})  # the scheme is case-insensitive
        assert status == 200 and headers["mcp-session-id"]


@pytest.mark.slow
@pytest.mark.integration
def test_the_sdks_host_and_origin_checks_still_refuse(tmp_path: Path) -> None:
    """DNS rebinding: a Host or an Origin that is not this server's is refused, token or not."""
    with spawned(tmp_path) as served:
        assert request(served, {**bearer(), "Host": "attacker.example:80"})[::2] == (421, b"Invalid Host header")
        assert request(served, {**bearer(), "Origin": "http://attacker.example"})[::2] == (
            403,
            b"Invalid Origin header",
        )
        assert request(served, {**bearer(), "Origin": f"http://127.0.0.1:{served.port}"})[0] == 200
        assert request(served, {**bearer(), "Host": f"localhost:{served.port}"})[0] == 200
        assert request(served, {"Host": "attacker.example:80"})[0] == 401  # the token is checked first


@pytest.mark.slow
@pytest.mark.integration
def test_the_token_file_is_private_reused_and_overridden_by_the_environment(tmp_path: Path) -> None:
    with spawned(tmp_path, token=None, name="first") as served:
        path = served.store / "http_token"
        token = path.read_text().strip()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert len(token) >= 40
        assert request(served, bearer(token))[0] == 200
        assert request(served, bearer())[0] == 401
        said = served.log.read_text()
        assert str(path) in said and token not in said  # where the token is, never the token
    with spawned(tmp_path, token=None, name="again") as served:
        assert path.read_text().strip() == token  # kept, not replaced
        assert request(served, bearer(token))[0] == 200
    with spawned(tmp_path, token="from-the-environment", name="env") as served:
        assert request(served, bearer("from-the-environment"))[0] == 200
        assert request(served, bearer(token))[0] == 401
        assert "$REMINDFUL_HTTP_TOKEN" in served.log.read_text()


@pytest.mark.slow
@pytest.mark.integration
def test_bound_to_loopback_by_default(tmp_path: Path) -> None:
    with spawned(tmp_path) as served:
        addresses = [a for a in _own_addresses() if not a.startswith("127.")]
        for address in addresses[:1]:  # another interface of this machine is refused
            with pytest.raises(OSError):
                socket.create_connection((address, served.port), timeout=1).close()


def _own_addresses() -> list[str]:
    try:
        return list({info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)})
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.integration
def test_an_unusable_token_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    (store / "http_token").write_text("leaked\n")
    os.chmod(store / "http_token", 0o644)
    result = subprocess.run(
        [remindful_script(), "serve", "--transport", "http", "--port", str(free_port())],
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: The HTTP token file") and "other users" in result.stderr
    assert "Traceback" not in result.stderr


# -- the token and the gate, in-process -------------------------------------------------------------


def test_the_token_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    store = tmp_path / "store"
    token = http_token(store)
    assert len(token) >= 40 and token == http_token(store) == token_file(store).read_text().strip()
    assert stat.S_IMODE(token_file(store).stat().st_mode) == 0o600
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert http_token(tmp_path / "other") != token


def test_the_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "  from-env  ")
    assert http_token(tmp_path / "store") == "from-env"
    assert not token_file(tmp_path / "store").exists()
    monkeypatch.setenv(TOKEN_ENV, " ")  # blank: as if unset
    assert http_token(tmp_path / "store") == token_file(tmp_path / "store").read_text().strip()


def test_processes_starting_together_agree_on_one_token(tmp_path: Path) -> None:
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(http_token(tmp_path / "store"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tokens) == 8 and len(set(tokens)) == 1


@pytest.mark.parametrize(
    ("prepare", "says"),
    [
        (lambda p: (p.write_text("x\n"), p.chmod(0o644)), "can be read by other users"),
        (lambda p: (p.write_text(""), p.chmod(0o600)), "is empty"),
        (lambda p: p.mkdir(), "Is a directory"),
        (lambda p: p.symlink_to(p.parent / "elsewhere"), "Cannot read"),
    ],
)
def test_an_unusable_token_file_is_an_error_saying_what_to_do(tmp_path: Path, prepare: Any, says: str) -> None:
    path = tmp_path / "store" / "http_token"
    path.parent.mkdir()
    prepare(path)
    with pytest.raises(StorageError, match=says):
        http_token(tmp_path / "store")


def test_bearer_ok() -> None:
    assert bearer_ok(f"Bearer {TOKEN}", TOKEN) and bearer_ok(f"bearer  {TOKEN} ".encode(), TOKEN)
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ", "Bearer é", b"Bearer \xff"):
        assert not bearer_ok(header, TOKEN), header
    assert not bearer_ok("Bearer ", "")


@pytest.mark.anyio
async def test_the_gate_lets_only_bearers_through() -> None:
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["type"])

    gate = BearerGate(app, TOKEN)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
        return {"type": "http", "headers": list(headers)}

    await gate({"type": "lifespan"}, None, send)
    await gate(scope((b"authorization", f"Bearer {TOKEN}".encode())), None, send)
    assert reached == ["lifespan", "http"] and not sent
    token = (b"authorization", f"Bearer {TOKEN}".encode())
    await gate(scope(token, token), None, send)  # two Authorization headers: which one counts?
    await gate(scope(), None, send)
    assert reached == ["lifespan", "http"]
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [401, 401]


def test_transport_security_allows_only_this_servers_names_and_port() -> None:
    loopback = transport_security("127.0.0.1", 8000)
    assert loopback.enable_dns_rebinding_protection
    assert loopback.allowed_hosts == ["127.0.0.1:8000", "localhost:8000", "[::1]:8000"]
    assert loopback.allowed_origins == ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"]
    lan = transport_security("192.168.1.20", 9000)
    assert lan.allowed_hosts[-1] == "192.168.1.20:9000" and lan.allowed_origins[-1] == "http://192.168.1.20:9000"
    assert "localhost" in transport_security("127.0.0.1", 80).allowed_hosts  # a client omits port 80
    assert socket.gethostname() in served_names("0.0.0.0")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://127.0.0.1:8000"}, 200),
        ({"Origin": "http://localhost:8000"}, 200),
        ({"Origin": "http://127.0.0.1:9999"}, 403),  # another server on this machine
        ({"Origin": "http://127.0.0.1"}, 403),
        ({"Origin": "https://127.0.0.1:8000"}, 403),
        ({"Origin": "http://127.0.0.1:8000.evil.example"}, 403),  # the SDK's ":*" matched this by prefix
        ({"Origin": "null"}, 403),
        ({"Host": "127.0.0.1:9999"}, 421),
        ({"Host": "127.0.0.1:8000.evil.example"}, 421),
    ],
)
def test_the_sdk_checks_origin_and_host_with_the_port(headers: dict[str, str], status: int) -> None:
    from remindful.shells.mcp.server import build_server, http_app
    from remindful.testing import open_fake

    with tempfile.TemporaryDirectory() as folder, open_fake(Path(folder) / "store") as memory:
        app = http_app(build_server(lambda: memory), TOKEN, port=8000)
        with TestClient(app, base_url="http://127.0.0.1:8000") as client:
            answer = client.post(
                "/mcp",
                json=INITIALIZE,
                headers={**bearer(), "Accept": "application/json, text/event-stream", **headers},
            )
            assert answer.status_code == status, answer.text
            assert answer.headers["x-content-type-options"] == "nosniff"  # every answer, the SDK's too
