"""Secret matrix: generated secrets of every kind through every write path, then every file of the store scanned.

The kinds (issue 28's 17 and the 38 issue 32 found leaking) and their generators are
``bench/secret_corpus.py``'s, which also measures the redactors alone on many samples of each and on
ordinary text.

Each cell (a kind of secret x a write path) gets a secret of its own, written through the public
surfaces only: the library (``remindful.open``), the CLI (typer's runner over the ``remindful`` app),
the MCP tools (the SDK's in-process client over ``build_server``), the coding-agent hooks (real
``remindful hook EVENT`` processes with Claude Code payloads, drained into the store), the Markdown
watcher (``watch --once``, the secret across a chunk boundary) and the proxy (``remindful proxy``
around a small MCP server, driven by the SDK's stdio client). Then ``export`` and ``backup`` run, and
every file under the storage directory is read (the catalog and its -wal, Chroma's files, logs,
exports, backup archives opened member by member): a cell leaks when any 8-character piece of its
secret (12 digits for a card, separators ignored) is found, case ignored (full-text indexes store
lower-cased tokens).

A cell prints ``.`` when clean, else where its secret was found: C catalog (and -wal/-shm),
V vector index (chroma/), B backup archive, E export, L logs, O other files; ``!`` when the surface
refused the input (the error is listed). The ``canary`` row carries a harmless unique word through
the same paths: it must be found on every write path (a path whose canary is missing wrote nothing
and proves nothing) and on none of the read-only ones (searches).

``--baseline REV`` runs the same matrix (same seed, same secrets) first against the source tree of
commit REV (``git archive REV src``, put first on PYTHONPATH of a child process) and prints both,
e.g. the redactor before and after a change.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remindful.runtime import SESSION_ID_MAX_CHARS, fit_session_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the kinds are shared with secret_corpus.py (run as a script or loaded by a test)
from secret_corpus import CANARY, CARD_WINDOW, HEX_WINDOW, KINDS, WINDOW, Sample, card_sample  # noqa: E402

CHUNK_WORDS, OVERLAP_WORDS = 200, 50  # the Markdown chunker's (spec REQ-P1-07)

# -- a run: the store, the samples, what went wrong -------------------------------------------------


@dataclass
class Run:
    store: Path
    scratch: Path
    seed: int
    kinds: list[str]
    remindful: list[str]  # the command that runs the ``remindful`` console script
    env: dict[str, str]  # for child processes and the in-process surfaces
    errors: dict[tuple[str, str], str] = field(default_factory=dict)
    _samples: dict[tuple[str, str], Sample] = field(default_factory=dict)

    def sample(self, kind: str, path: str) -> Sample:
        """The secret of one cell: the same for the same seed, kind and path; unique to the cell."""
        key = (kind, path)
        if key not in self._samples:
            rng = random.Random(f"{self.seed}:{kind}:{path}")
            # where a chunk boundary splits the secret, the card is grouped: four words to split
            chunked = path in ("cli.watch", "hook.stop")
            made = card_sample(rng, grouped=True) if chunked and kind == "card_16_digits" else KINDS[kind](rng)
            self._samples[key] = made
        return self._samples[key]

    def each(self, path: str, write: Callable[[str, Sample], Any]) -> None:
        """``write(kind, sample)`` for every kind; an error is recorded for the cell, not raised."""
        for kind in self.kinds:
            try:
                write(kind, self.sample(kind, path))
            except Exception as exc:  # a surface that refuses the input: recorded, shown as "!"
                self.errors[(kind, path)] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside the block (the in-process surfaces read their settings there)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def session_of(sample: Sample) -> str:
    """A session id holding the sample: its whole text, or (where that passes the 256 characters
    every surface but a hook refuses) the bare secret."""
    for sid in (f"deploy-{sample.text}", f"deploy-{sample.bare}"):
        if len(sid) <= SESSION_ID_MAX_CHARS:
            return sid
    return fit_session_id(f"deploy-{sample.text}")


def straddling(sample: Sample, tail_words: int = 150) -> dict[str, str]:
    """Two texts with ``sample`` across a chunk boundary: in "end" the secret's last word is the first
    after chunk 1 (chunk 1 holds its head), in "start" its first word is the last before chunk 2
    begins (chunk 2 holds its tail)."""
    lead, size = len(sample.text[: sample.text.find(sample.bare)].split()), len(sample.bare.split())
    after = " ".join(f"tail{i}" for i in range(tail_words))
    texts = {}
    for name, boundary, kept in (("end", CHUNK_WORDS, size - 1), ("start", CHUNK_WORDS - OVERLAP_WORDS, 1)):
        before = " ".join(f"filler{i}" for i in range(max(0, boundary - lead - kept)))
        texts[name] = f"{before} {sample.text} {after}"
    return texts


def unique(label: str, kind: str) -> str:
    """An ordinary content unique to a cell (identical contents could be folded together)."""
    return f"{label} for {kind.replace('_', ' ')}"


# -- the write paths -----------------------------------------------------------------------------------


def library_paths(run: Run) -> None:
    import remindful

    with remindful.open(run.store, **{"embeddings.backend": "fake"}) as memory:

        def store(kind: str, s: Sample) -> None:
            memory.store(s.text, type="knowledge")

        def meta(kind: str, s: Sample) -> None:
            memory.store(unique("deploy notes", kind), metadata={"ctx": {"notes": [s.text], "n": 1}})

        def meta_named(kind: str, s: Sample) -> None:
            memory.store(unique("deploy config", kind), metadata={"deploy": {"env": "prod", s.field: s.bare}})

        def meta_key(kind: str, s: Sample) -> None:
            memory.store(unique("seen keys", kind), metadata={"seen": {s.text: 1}})

        def session(kind: str, s: Sample) -> None:
            memory.store(unique("session note", kind), session_id=session_of(s))

        def batch(kind: str, s: Sample) -> None:
            item = {"content": s.text, "type": "knowledge", "metadata": {"auth": {s.field: s.bare}}}
            memory.store_batch([{**item, "session_id": session_of(s)}])

        def update(kind: str, s: Sample) -> None:
            memory_id = memory.store(unique("placeholder", kind))
            memory.update(memory_id, content=s.text, metadata={"creds": {s.field: s.bare}})

        target = memory.store("The staging deploy runs from the release branch", type="knowledge")

        def confirm(kind: str, s: Sample) -> None:
            memory.confirm(s.text, target)

        for path, write in (
            ("lib.store", store),
            ("lib.meta", meta),
            ("lib.meta_named", meta_named),
            ("lib.meta_key", meta_key),
            ("lib.session", session),
            ("lib.batch", batch),
            ("lib.update", update),
            ("lib.confirm", confirm),
        ):
            run.each(path, write)
        memory.flush()


def cli_paths(run: Run) -> None:
    from typer.testing import CliRunner

    from remindful.shells.cli.app import app

    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(app, ["--path", str(run.store), *args], env=run.env)
        if result.exit_code != 0:
            raise RuntimeError(f"remindful {args[0]} exited {result.exit_code}: {result.output.strip()[-300:]}")
        return result.output

    # the id is the last line (log lines of earlier surfaces may come first in the runner's output)
    target = cli("store", "The production deploy needs two approvals", "--type", "knowledge").strip().splitlines()[-1]

    def store(kind: str, s: Sample) -> None:
        cli("store", s.text, "--metadata", json.dumps({"db": {"host": "db1", s.field: s.bare}}))

    def session(kind: str, s: Sample) -> None:
        cli("store", unique("cli session note", kind), "--session", session_of(s))

    def confirm(kind: str, s: Sample) -> None:
        cli("confirm", s.text, target)

    def turn(kind: str, s: Sample) -> None:
        cli("capture-turn", f"Remember that the deploy credential is {s.text}", "--response", f"Noted: {s.text}")

    def correction(kind: str, s: Sample) -> None:
        cli("capture-correction", f"Deploy with {s.text}", "Deploy with the vault credentials", "--context", s.text)

    def config(kind: str, s: Sample) -> None:
        setting = "api_token" if kind != CANARY else "deploy_target"
        cli("capture-config", setting, json.dumps(s.bare), "--old", json.dumps(f"old {s.bare}"))

    for path, write in (
        ("cli.store", store),
        ("cli.session", session),
        ("cli.confirm", confirm),
        ("cli.capture_turn", turn),
        ("cli.correction", correction),
        ("cli.config", config),
    ):
        run.each(path, write)

    # import: one export-format file with a memory per kind
    memories = []
    for i, kind in enumerate(run.kinds):
        s = run.sample(kind, "cli.import")
        memories.append(
            {
                "id": f"knowledge_20240101000000{i:06d}_{i:08x}",
                "type": "knowledge",
                "content": s.text,
                "metadata": {"creds": {s.field: s.bare}, "note": s.text},
                "source": "manual",
                # An export holds ids within the limit (an import refuses a longer one whole): as a
                # hook keeps a long one, so does the file a store exported.
                "session_id": fit_session_id(session_of(s)),
                "created_at": 1_704_067_200.0 + i,
            }
        )
    source = run.scratch / "import.json"
    source.write_text(json.dumps({"format": "remindful-export", "version": 1, "memories": memories}))
    try:
        cli("import", str(source))
    except Exception as exc:
        for kind in run.kinds:
            run.errors[(kind, "cli.import")] = f"{type(exc).__name__}: {exc}"

    # the Markdown watcher: each secret straddles a chunk boundary
    docs = run.scratch / "docs"
    docs.mkdir(exist_ok=True)
    for kind in run.kinds:
        s = run.sample(kind, "cli.watch")
        for name, text in straddling(s).items():
            (docs / f"{kind}-{name}.md").write_text(text + "\n")
    try:
        cli("watch", str(docs), "--once")
    except Exception as exc:
        for kind in run.kinds:
            run.errors[(kind, "cli.watch")] = f"{type(exc).__name__}: {exc}"


def mcp_paths(run: Run) -> None:
    import anyio
    from mcp import Client

    from remindful.shells.mcp.server import build_server

    async def main() -> None:
        server = build_server(path=run.store)
        async with Client(server) as client:

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                if result.is_error:
                    raise RuntimeError(f"{tool}: {result.content[0].text}")  # type: ignore[union-attr]
                return result.structured_content or {}

            stored = await call("memory_store", content="The canary deploy goes out on Tuesdays", type="knowledge")
            target = stored["memory_id"]
            for kind in run.kinds:
                for path, tool, arguments in _mcp_calls(run, kind, target):
                    try:
                        if path == "mcp.update":
                            made = await call("memory_store", content=unique("mcp placeholder", kind))
                            arguments = {**arguments, "memory_id": made["memory_id"]}
                        await call(tool, **arguments)
                    except Exception as exc:
                        run.errors[(kind, path)] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    anyio.run(main)


def _mcp_calls(run: Run, kind: str, target: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    s = run.sample(kind, "mcp.store")
    yield "mcp.store", "memory_store", {"content": s.text, "metadata": {"deploy": {s.field: s.bare}}}
    s = run.sample(kind, "mcp.session")
    yield "mcp.session", "memory_store", {"content": unique("mcp session note", kind), "session_id": session_of(s)}
    s = run.sample(kind, "mcp.batch")
    item = {"content": s.text, "metadata": {"auth": {s.field: s.bare}}, "session_id": session_of(s)}
    yield "mcp.batch", "memory_store_batch", {"items": [item]}
    s = run.sample(kind, "mcp.update")
    yield "mcp.update", "memory_update", {"content": s.text, "metadata": {"creds": {s.field: s.bare}}}
    s = run.sample(kind, "mcp.search")
    yield "mcp.search", "memory_search", {"query": s.text}
    s = run.sample(kind, "mcp.search_session")
    yield "mcp.search_session", "memory_search", {"query": "deploy", "session_id": session_of(s)}
    s = run.sample(kind, "mcp.confirm")
    yield "mcp.confirm", "memory_confirm", {"query": s.text, "memory_id": target}


def hook_paths(run: Run) -> None:
    """Real ``remindful hook EVENT`` processes, as Claude Code runs them; the next open drains them."""
    for kind in run.kinds:
        # the whole text, however long: a hook keeps an event whose id is over the limit (shortened)
        session = f"deploy-{run.sample(kind, 'hook.session').text}"
        prompt = run.sample(kind, "hook.prompt")
        tool = run.sample(kind, "hook.tool")
        stop = run.sample(kind, "hook.stop")
        answer = straddling(stop, tail_words=400)["end"]
        transcript = run.scratch / f"transcript-{kind}.jsonl"
        lines = [
            {"type": "user", "message": {"role": "user", "content": "deploy it"}},
            # a long answer (chunked over 500 words) with the secret across a chunk boundary
            {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]}},
        ]
        transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
        base = {"session_id": session, "cwd": str(run.scratch), "transcript_path": str(transcript)}
        command = {"command": f"./deploy.sh && echo {tool.text}", "description": "deploy"}
        events = [
            ("SessionStart", "hook.session", {"source": "startup"}),
            ("UserPromptSubmit", "hook.prompt", {"prompt": prompt.text}),
            ("PreToolUse", "hook.tool", {"tool_name": "Bash", "tool_input": command, "tool_use_id": f"t-{kind}"}),
            (
                "PostToolUse",
                "hook.tool",
                {
                    "tool_name": "Bash",
                    "tool_input": command,
                    "tool_response": {"stdout": f"deployed: {tool.text}", "stderr": "", "exit_code": 0},
                    "tool_use_id": f"t-{kind}",
                },
            ),
            ("Stop", "hook.stop", {"stop_hook_active": False}),
            ("SessionEnd", "hook.session", {"reason": "exit"}),
        ]
        for event, path, extra in events:
            payload = {**base, "hook_event_name": event, **extra}
            done = subprocess.run(
                [*run.remindful, "--path", str(run.store), "hook", event, "--no-context"],
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                env=run.env,
                timeout=120,
            )
            if done.returncode != 0:
                run.errors[(kind, path)] = f"hook {event} exited {done.returncode}: {done.stderr.strip()[-200:]}"


ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("deployer")


@mcp.tool()
def deploy(command: str, config: dict) -> str:
    \"\"\"Run a deploy command.\"\"\"
    return f"ran {command}"


mcp.run("stdio")
"""


def proxy_paths(run: Run) -> None:
    """``remindful proxy`` around a small MCP server, driven by the SDK's stdio client."""
    import anyio
    from mcp import Client, StdioServerParameters

    script = run.scratch / "deployer.py"
    script.write_text(ECHO_SERVER)
    command, *args = run.remindful
    args += ["--path", str(run.store), "proxy", "--session", "proxied", "--", sys.executable, str(script)]

    async def main() -> None:
        params = StdioServerParameters(command=command, args=args, env=run.env)
        async with Client(params, read_timeout_seconds=120) as client:
            for kind in run.kinds:
                s = run.sample(kind, "proxy.args")
                arguments = {"command": s.text, "config": {"region": "eu", s.field: s.bare}}
                try:
                    await client.call_tool("deploy", arguments)
                except Exception as exc:
                    run.errors[(kind, "proxy.args")] = f"{type(exc).__name__}: {exc}"

    try:
        anyio.run(main)
    except Exception as exc:
        for kind in run.kinds:
            run.errors.setdefault((kind, "proxy.args"), f"proxy: {type(exc).__name__}: {exc}")


def sinks(run: Run) -> None:
    """Drain what the proxy and hooks left in the spool, then export and back up: both are scanned."""
    from typer.testing import CliRunner

    import remindful
    from remindful.shells.cli.app import app

    with remindful.open(run.store, **{"embeddings.backend": "fake"}) as memory:
        memory.stats()
        memory.flush()
    runner = CliRunner()
    for args in (["export"], ["backup", "secret-matrix"]):
        result = runner.invoke(app, ["--path", str(run.store), *args], env=run.env)
        if result.exit_code != 0:
            raise RuntimeError(f"remindful {args[0]} exited {result.exit_code}: {result.output}")


#: The write paths, in the order they run and are printed: (name, surface runner).
PATHS: dict[str, list[str]] = {
    "hooks": ["hook.prompt", "hook.tool", "hook.stop", "hook.session"],
    "library": [
        "lib.store",
        "lib.meta",
        "lib.meta_named",
        "lib.meta_key",
        "lib.session",
        "lib.batch",
        "lib.update",
        "lib.confirm",
    ],
    "cli": [
        "cli.store",
        "cli.session",
        "cli.confirm",
        "cli.capture_turn",
        "cli.correction",
        "cli.config",
        "cli.import",
        "cli.watch",
    ],
    "mcp": ["mcp.store", "mcp.session", "mcp.batch", "mcp.update", "mcp.search", "mcp.search_session", "mcp.confirm"],
    "proxy": ["proxy.args"],
}
SURFACES: dict[str, Callable[[Run], None]] = {
    "hooks": hook_paths,
    "library": library_paths,
    "cli": cli_paths,
    "mcp": mcp_paths,
    "proxy": proxy_paths,
}
ALL_PATHS = [p for paths in PATHS.values() for p in paths]
#: Paths that must write nothing at all (their canary must be absent too).
READ_ONLY = frozenset(("mcp.search", "mcp.search_session"))

# -- the scan -----------------------------------------------------------------------------------------


def place(name: str) -> str:
    """The letter of a file: C catalog, V vector index, B backup, E export, L logs, O other."""
    parts = name.split("/")
    if parts[0] == "backups":
        return "B"
    if parts[0] == "exports":
        return "E"
    if parts[0] == "logs":
        return "L"
    if "chroma" in name:
        return "V"
    if parts[-1].startswith("catalog.sqlite3"):
        return "C"
    return "O"


def files(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every file under ``root`` as (relative name, bytes); archives also member by member."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        name = path.relative_to(root).as_posix()
        yield from _unpacked(name, path.read_bytes())


def _unpacked(name: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    yield name, data
    try:
        if data[:2] == b"\x1f\x8b":
            inner = gzip.decompress(data)
            if tarfile.is_tarfile(io.BytesIO(inner)):
                with tarfile.open(fileobj=io.BytesIO(inner)) as archive:
                    for member in archive.getmembers():
                        handle = archive.extractfile(member) if member.isfile() else None
                        if handle is not None:
                            yield from _unpacked(f"{name}:{member.name}", handle.read())
            else:
                yield from _unpacked(f"{name}:gunzip", inner)
        elif data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for info in archive.infolist():
                    yield from _unpacked(f"{name}:{info.filename}", archive.read(info))
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile):
        return


_PRINTABLE_RUN = re.compile(rb"[\x21-\x7e]{%d,}" % WINDOW)
_HEX_PIECE = re.compile(rb"[0-9a-f]+")
_DIGIT_RUN = re.compile(rb"\d(?:[ -]?\d){%d,}" % (CARD_WINDOW - 1))


def scan(root: Path, samples: dict[tuple[str, str], Sample]) -> dict[tuple[str, str], dict[str, str]]:
    """For each cell whose secret was found: {file name: letter}."""
    windows: dict[bytes, set[tuple[str, str]]] = {}
    digit_windows: dict[bytes, set[tuple[str, str]]] = {}
    for cell, sample in samples.items():
        for piece in sample.pieces:
            if sample.digits:
                digits = re.sub(r"\D", "", piece).encode()
                for i in range(len(digits) - CARD_WINDOW + 1):
                    digit_windows.setdefault(digits[i : i + CARD_WINDOW], set()).add(cell)
            else:
                low = piece.lower().encode()
                # a long hex-only secret (a short one keeps the usual window: it would go unseen)
                width = HEX_WINDOW if len(low) >= 2 * HEX_WINDOW and _HEX_PIECE.fullmatch(low) else WINDOW
                for i in range(len(low) - width + 1):
                    window = low[i : i + width]
                    if not window.isdigit():  # 8 digits appear by chance in every id's timestamp
                        windows.setdefault(window, set()).add(cell)
                for run in re.findall(rb"\d{%d,}" % CARD_WINDOW, low):  # a secret's digits: as a card's
                    for i in range(len(run) - CARD_WINDOW + 1):
                        digit_windows.setdefault(run[i : i + CARD_WINDOW], set()).add(cell)
    found: dict[tuple[str, str], dict[str, str]] = {}
    for name, data in files(root):
        hits: set[tuple[str, str]] = set()
        for run_match in _PRINTABLE_RUN.finditer(data.lower()):
            text = run_match.group(0)
            for width in (WINDOW, HEX_WINDOW):
                for i in range(len(text) - width + 1):
                    cells = windows.get(text[i : i + width])
                    if cells:
                        hits |= cells
        for run_match in _DIGIT_RUN.finditer(data):
            digits = re.sub(rb"\D", b"", run_match.group(0))
            for i in range(len(digits) - CARD_WINDOW + 1):
                cells = digit_windows.get(digits[i : i + CARD_WINDOW])
                if cells:
                    hits |= cells
        for cell in hits:
            found.setdefault(cell, {})[name] = place(name)
    return found


# -- the whole matrix ---------------------------------------------------------------------------------


def remindful_command() -> list[str]:
    """This interpreter's ``remindful`` console script (whatever remindful PYTHONPATH selects)."""
    return [sys.executable, "-c", "import sys; from remindful.shells.entry import main; sys.exit(main())"]


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "MEMORY_STORAGE_PATH"}
    env.update(HOME=str(home), REMINDFUL_EMBEDDINGS__BACKEND="fake")
    env["REMINDFUL_HOOKS__START_DAEMON"] = "false"  # no daemon outliving the run
    return env


def run_matrix(
    root: Path, *, seed: int = 28, kinds: list[str] | None = None, surfaces: list[str] | None = None
) -> dict[str, Any]:
    """Write every cell's secret through its path into a store under ``root``, export, back up, scan.
    Returns ``cells`` ({kind: {path: letters}}; "" clean, "!" refused), ``leaked`` (cells found,
    canary excluded), ``canary_missing`` (paths that wrote nothing), ``errors`` and the counts."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    scratch = root / "scratch"
    scratch.mkdir(exist_ok=True)
    run = Run(
        store=root / "store",
        scratch=scratch,
        seed=seed,
        kinds=list(kinds or KINDS),
        remindful=remindful_command(),
        env=child_env(home),
    )
    chosen = [s for s in SURFACES if surfaces is None or s in surfaces]
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    with environment(run.env):
        for surface in chosen:
            began = time.perf_counter()
            SURFACES[surface](run)
            seconds[surface] = round(time.perf_counter() - began, 1)
        sinks(run)
    paths = [p for s in chosen for p in PATHS[s]]
    samples = {(k, p): run.sample(k, p) for k in run.kinds for p in paths}
    found = scan(run.store, samples)
    cells = {
        kind: {
            path: "!" if (kind, path) in run.errors else "".join(sorted(set(found.get((kind, path), {}).values())))
            for path in paths
        }
        for kind in run.kinds
    }
    leaked = {f"{k} x {p}": sorted(found[(k, p)]) for k in run.kinds if k != CANARY for p in paths if (k, p) in found}
    canary = cells.get(CANARY, {})
    canary_missing = [p for p in paths if CANARY in run.kinds and p not in READ_ONLY and canary[p] in ("", "!")]
    read_paths_writing = [p for p in paths if p in READ_ONLY and canary.get(p, "") not in ("", "!")]
    stored = sum(1 for _ in files(run.store))
    return {
        "paths": paths,
        "kinds": run.kinds,
        "cells": cells,
        "leaked": leaked,
        "leaked_count": len(leaked),
        "total": len([k for k in run.kinds if k != CANARY]) * len(paths),
        "canary_missing": canary_missing,
        "read_paths_writing": read_paths_writing,
        "errors": {f"{k} x {p}": e for (k, p), e in sorted(run.errors.items())},
        "files_scanned": stored,
        "seconds": {**seconds, "total": round(time.perf_counter() - started, 1)},
    }


def format_leaks(result: dict[str, Any]) -> str:
    """The leaked cells by path, one line each: the kinds and where their secrets were found."""
    out = []
    for path in result["paths"]:
        kinds = [k for k in result["kinds"] if k != CANARY and result["cells"][k][path] not in ("", "!")]
        if kinds:
            places = "".join(sorted({c for k in kinds for c in result["cells"][k][path]}))
            which = f"all {len(kinds)} kinds" if len(kinds) == len(result["kinds"]) - 1 else ", ".join(kinds)
            out.append(f"  {path}: {which} (found in {places})")
    return "\n".join(out)


def matrix_lines(result: dict[str, Any], title: str) -> Iterator[str]:
    paths, kinds = result["paths"], result["kinds"]
    width = max(len(k) for k in kinds) + 1
    shape = f"{len(kinds) - (CANARY in kinds)} kinds x {len(paths)} paths"
    yield f"{title}: {result['leaked_count']} of {result['total']} cells leaked ({shape})"
    yield " " * width + " ".join(f"{i:>3}" for i in range(1, len(paths) + 1))
    for kind in kinds:
        row = " ".join(f"{(result['cells'][kind][p] or '.'):>3}" for p in paths)
        yield f"{kind:<{width}}{row}"
    yield "paths: " + "  ".join(f"{i}={p}" for i, p in enumerate(paths, 1))
    per_path = {p: sum(1 for k in kinds if k != CANARY and result["cells"][k][p] not in ("", "!")) for p in paths}
    yield "leaked per path: " + (", ".join(f"{p} {n}" for p, n in per_path.items() if n) or "none")
    if result["canary_missing"]:
        yield f"NOT EXERCISED (canary not found): {', '.join(result['canary_missing'])}"
    if result["read_paths_writing"]:
        yield f"READ PATHS THAT WRITE (canary found): {', '.join(result['read_paths_writing'])}"
    yield f"read-only paths (must write nothing, canary absent): {', '.join(p for p in paths if p in READ_ONLY)}"
    for cell, error in result["errors"].items():
        yield f"refused {cell}: {error}"


def lines(result: dict[str, Any]) -> Iterator[str]:
    yield "legend: . clean; where found: C catalog(-wal) V vector index B backup E export L logs O other; ! refused"
    if "baseline" in result:
        yield from matrix_lines(result["baseline"], f"baseline {result['baseline_rev']}")
        yield ""
    yield from matrix_lines(result, "this tree")
    if result["leaked"]:
        yield "leaked cells of this tree, by path:"
        yield format_leaks(result)
    if "baseline" in result:
        before, rev = result["baseline"]["leaked_count"], result["baseline_rev"]
        yield f"leaked cells: {before} at {rev} -> {result['leaked_count']} now"
    yield f"{result['files_scanned']} files scanned; seconds: {result['seconds']}"


def baseline(rev: str, seed: int, kinds: list[str] | None) -> dict[str, Any]:
    """The same matrix against the source tree of commit ``rev``, in a child process."""
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="remindful-secrets-base-") as tmp:
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "src"], capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        argv = [sys.executable, str(Path(__file__).resolve()), "--json", "--seed", str(seed)]
        if kinds:
            argv += ["--kinds", *kinds]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the baseline run at {rev} failed:\n{done.stderr[-2000:]}")
        return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    sys.path.append(str(HERE))
    from common import emit, machine, parser, scratch_dir

    args_parser = parser(__doc__)
    args_parser.add_argument("--seed", type=int, default=28, help="secrets are generated from this seed")
    args_parser.add_argument("--kinds", nargs="+", choices=list(KINDS), help="only these kinds (default: all)")
    args_parser.add_argument("--baseline", metavar="REV", help="also run the matrix against commit REV's src/")
    args_parser.add_argument("--keep", type=Path, help="keep the store in this directory (must not exist)")
    args = args_parser.parse_args(argv)
    kinds = args.kinds and [*args.kinds, *([CANARY] if CANARY not in args.kinds else [])]
    before = baseline(args.baseline, args.seed, args.kinds) if args.baseline else None
    if args.keep:
        args.keep.mkdir(parents=True)
        result = run_matrix(args.keep, seed=args.seed, kinds=kinds)
    else:
        with scratch_dir("remindful-secrets-") as root:
            result = run_matrix(root, seed=args.seed, kinds=kinds)
    if before is not None:
        result.update(baseline=before, baseline_rev=args.baseline)
    result["machine"] = machine()
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
