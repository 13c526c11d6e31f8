"""Cold start of `remindful serve`: process spawn → `initialize` → `tools/list` answered.

Speaks raw JSON-RPC (no client library in the timing) and compares against the interpreter's own
start (`python -c pass`) measured in the same run. Every start uses a fresh storage directory.
Cases (stdio unless said):

- first start: a fresh HOME, so no per-user cache: answered from the manifest shipped in the package;
- later starts: the same HOME again (a per-user cache exists only if an answer ever differed);
- no manifest: the shipped manifest disabled (a `sitecustomize` makes it not apply) and a fresh HOME,
  so the SDK answers after its import — the first start before the manifest was shipped;
- http: `serve --transport http`, from spawn to the `tools/list` answer over streamable HTTP
  (initialize, notifications/initialized, tools/list: answered by the front from the shipped manifest);
- http, no manifest: the same with the shipped manifest disabled, so the SDK answers after its
  import — as every HTTP start did before the front (commit c116f65 and earlier);
- 2026 era (stdio and http): what the SDK 2.x client sends in its default ``mode="auto"``:
  ``server/discover``, then (after its answer) ``tools/list``, both in the 2026-07-28 envelope
  (over HTTP sessionless, with the ``MCP-Protocol-Version`` and ``Mcp-Method`` headers). Until
  the fronts answered this era early, both waited for the SDK import (~1.5 s).

    python bench/mcp_cold_start.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
MODERN = "2026-07-28"
ENVELOPE = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": ENVELOPE}
MODERN_TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": ENVELOPE}
NO_SHIPPED_MANIFEST = "import remindful.shells.mcp.manifest as m\nm.load = lambda path=None: None\n"


def remindful_command() -> list[str]:
    script = Path(sys.executable).parent / "remindful"
    return [str(script), "serve"] if script.exists() else [sys.executable, "-m", "remindful.shells.entry", "serve"]


def time_serve(env: dict[str, str], *, modern: bool = False) -> tuple[float, int]:
    """Seconds from spawn to the tools/list answer, and the number of tools listed. ``modern``:
    server/discover, then tools/list once it is answered (as the SDK client's auto mode)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        remindful_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    first = (DISCOVER,) if modern else (INITIALIZE, INITIALIZED, TOOLS_LIST)
    proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in first))
    proc.stdin.flush()
    tools = -1
    for line in proc.stdout:
        message = json.loads(line)
        if message.get("id") == 1 and modern:
            assert message["result"]["supportedVersions"] == [MODERN], message
            proc.stdin.write(json.dumps(MODERN_TOOLS_LIST).encode() + b"\n")
            proc.stdin.flush()
        if message.get("id") == 2:
            tools = len(message["result"]["tools"])
            break
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(timeout=60)
    return elapsed, tools


def _post(url: str, body: dict[str, object], session: str | None) -> tuple[str | None, dict[str, object]]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
        headers["Mcp-Protocol-Version"] = "2025-06-18"
    params = body.get("params")
    if isinstance(params, dict) and "_meta" in params:  # the 2026 era: sessionless, routed by headers
        headers["Mcp-Protocol-Version"] = MODERN
        headers["Mcp-Method"] = str(body["method"])
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
        sid = response.headers.get("Mcp-Session-Id")
    if not text.strip():
        return sid, {}
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")] or [text]
    return sid, json.loads(data[-1])


def time_http(env: dict[str, str], *, modern: bool = False) -> float:
    """Seconds from spawn of `serve --transport http` to its tools/list answer (``modern``: the
    sessionless server/discover, then tools/list)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*remindful_command(), "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        while True:
            try:
                session, _ = _post(url, DISCOVER if modern else INITIALIZE, None)
                break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.perf_counter() - started > 60:
                    raise RuntimeError("serve --transport http did not start") from None
                time.sleep(0.01)
        if modern:
            _, answer = _post(url, MODERN_TOOLS_LIST, None)
        else:
            _post(url, INITIALIZED, session)
            _, answer = _post(url, TOOLS_LIST, session)
        assert answer["result"]["tools"], answer  # type: ignore[index]
        return time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def time_python() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_")}
        base.pop("XDG_CACHE_HOME", None)
        patch = Path(tmp) / "patch"
        patch.mkdir()
        (patch / "sitecustomize.py").write_text(NO_SHIPPED_MANIFEST)
        first, later, bare, http, http_bare, modern, http_modern = [], [], [], [], [], [], []
        tools = -1
        for i in range(args.runs):
            env = {**base, "HOME": str(Path(tmp) / f"home{i}"), "MEMORY_STORAGE_PATH": str(Path(tmp) / f"a{i}")}
            seconds, tools = time_serve(env)
            first.append(seconds)
            later.append(time_serve({**env, "MEMORY_STORAGE_PATH": str(Path(tmp) / f"b{i}")})[0])
            no_manifest = {**env, "HOME": str(Path(tmp) / f"bare{i}"), "PYTHONPATH": str(patch)}
            bare.append(time_serve({**no_manifest, "MEMORY_STORAGE_PATH": str(Path(tmp) / f"c{i}")})[0])
            fresh = {**env, "HOME": str(Path(tmp) / f"m{i}"), "MEMORY_STORAGE_PATH": str(Path(tmp) / f"d{i}")}
            modern.append(time_serve(fresh, modern=True)[0])
        for i in range(args.runs):
            http.append(
                time_http({**base, "HOME": str(Path(tmp) / "h"), "MEMORY_STORAGE_PATH": str(Path(tmp) / f"h{i}")})
            )
        for i in range(args.runs):
            env = {**base, "HOME": str(Path(tmp) / "hm"), "MEMORY_STORAGE_PATH": str(Path(tmp) / f"hm{i}")}
            http_modern.append(time_http(env, modern=True))
        for i in range(min(args.runs, 3)):  # each of these waits for the whole SDK import: keep it short
            env = {**base, "HOME": str(Path(tmp) / "hb"), "MEMORY_STORAGE_PATH": str(Path(tmp) / f"hb{i}")}
            http_bare.append(time_http({**env, "PYTHONPATH": str(patch)}))
        python = [time_python() for _ in range(args.runs)]
    p50 = statistics.median
    result = {
        "tools": tools,
        "first_start_p50_s": round(p50(first), 3),
        "first_start_max_s": round(max(first), 3),
        "later_start_p50_s": round(p50(later), 3),
        "no_manifest_p50_s": round(p50(bare), 3),
        "http_p50_s": round(p50(http), 3),
        "http_max_s": round(max(http), 3),
        "http_no_manifest_p50_s": round(p50(http_bare), 3),
        "modern_p50_s": round(p50(modern), 3),
        "modern_max_s": round(max(modern), 3),
        "http_modern_p50_s": round(p50(http_modern), 3),
        "http_modern_max_s": round(max(http_modern), 3),
        "python_pass_p50_s": round(p50(python), 3),
        "overhead_p50_s": round(p50(first) - p50(python), 3),
        "budget_s": 0.5,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"remindful serve: spawn → initialize + tools/list ({tools} tools), {args.runs} runs"
        f" (http without manifest: {len(http_bare)})"
    )
    print(
        f"  first start (fresh HOME, shipped manifest) p50 {result['first_start_p50_s']:.3f} s,"
        f" max {result['first_start_max_s']:.3f} s  (budget 0.5 s)"
    )
    print(f"  later start (same HOME)                   p50 {result['later_start_p50_s']:.3f} s")
    print(f"  no manifest (the SDK answers)             p50 {result['no_manifest_p50_s']:.3f} s")
    print(
        f"  --transport http                          p50 {result['http_p50_s']:.3f} s,"
        f" max {result['http_max_s']:.3f} s  (budget 0.5 s)"
    )
    print(f"  --transport http, no manifest (the SDK)   p50 {result['http_no_manifest_p50_s']:.3f} s")
    print(
        f"  2026 era (SDK client auto mode), stdio    p50 {result['modern_p50_s']:.3f} s,"
        f" max {result['modern_max_s']:.3f} s  (budget 0.5 s)"
    )
    print(
        f"  2026 era (SDK client auto mode), http     p50 {result['http_modern_p50_s']:.3f} s,"
        f" max {result['http_modern_max_s']:.3f} s  (budget 0.5 s)"
    )
    print(f"  baseline python -c pass                   p50 {result['python_pass_p50_s']:.3f} s")
    print(f"  first start over the interpreter          p50 {result['overhead_p50_s']:.3f} s")


if __name__ == "__main__":
    main()
