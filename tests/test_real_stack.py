"""The real path end to end: ONNX all-MiniLM-L6-v2, embedded Chroma, SQLite, several processes.

The tests of several processes and of crashes (a child killed with SIGKILL) keep the real Chroma and
SQLite but the fake embedder: what they check (what was acknowledged survives, nothing deleted comes
back) lives in the stores, and each child would otherwise prepare and load the model on its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful.api import MemoryManager

pytestmark = pytest.mark.slow


def test_semantic_search_finds_related_memories(real_memory: MemoryManager) -> None:
    login = real_memory.store("Login form automation", type="screen")
    auth = real_memory.store("User authentication workflow", type="workflow")
    real_memory.store("Homepage screenshot", type="screen")
    real_memory.store("Recipe for banana bread with walnuts", type="knowledge")
    hits = real_memory.search("login process", limit=5)
    top2 = {h.id for h in hits[:2]}
    assert top2 == {login, auth}
    assert all(h.type.value in ("screen", "workflow", "knowledge") for h in hits)


def test_paraphrase_is_found_by_the_dense_space(real_memory: MemoryManager) -> None:
    target = real_memory.store("The user prefers dark mode in every editor")
    for text in [
        "Deployed version 2.3 to staging",
        "The build failed on a missing semicolon",
        "Meeting moved to Thursday afternoon",
        "Bought coffee beans from the market",
    ]:
        real_memory.store(text)
    hits = real_memory.search("which colour theme does she like?", limit=3, min_score=0)  # the ranking
    assert hits[0].id == target
    assert "dense" in hits[0].sources


def test_exact_keyword_is_found_by_the_lexical_space(real_memory: MemoryManager) -> None:
    target = real_memory.store("Error code ZX-4471 means the license server is unreachable")
    for i in range(30):
        real_memory.store(f"Error number {i} was handled by the retry loop in the network client")
    hits = real_memory.search("ZX-4471", limit=3)
    assert hits[0].id == target
    assert "lexical" in hits[0].sources


def test_filters_hold_on_the_real_index(real_memory: MemoryManager) -> None:
    ok = real_memory.store("Clicked submit on the signup form", metadata={"success": True}, session_id="a")
    real_memory.store("Clicked submit on the signup form", metadata={"success": False}, session_id="a")
    real_memory.store("Clicked submit on the signup form", metadata={"success": True}, session_id="b")
    hits = real_memory.search("submit signup", filters={"success": True}, session_id="a")
    assert [h.id for h in hits] == [ok]


def _child(path: Path, body: str) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        f"""
        import json, sys, remindful
        memory = remindful.open({str(path)!r}, **{{"embeddings.backend": "fake"}})
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_another_process_sees_what_one_stored(tmp_path: Path) -> None:
    path = tmp_path / "shared"
    with remindful.open(path, **{"embeddings.backend": "fake"}) as memory:
        memory.store("opened first, by the parent")
        memory.search("warm the index up")
        child = _child(
            path,
            """
            ids = [memory.store(f"written by the child process number {i}") for i in range(5)]
            memory.close()
            print(json.dumps(ids))
        """,
        )
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        ids = json.loads(out)
        assert [m.id for m in memory.get_batch(ids) if m] == ids
        found = {h.id for h in memory.search("written by the child process", limit=10)}
        assert set(ids) <= found
        assert "dense" in next(h for h in memory.search("child process number 3") if h.id == ids[3]).sources


def test_kill_9_loses_no_acknowledged_memory(tmp_path: Path) -> None:
    path = tmp_path / "crash"
    child = _child(
        path,
        """
        for i in range(100000):
            memory_id = memory.store(f"memory {i} acknowledged before the crash")
            print(memory_id, flush=True)
    """,
    )
    acknowledged: list[str] = []
    deadline = time.monotonic() + 60
    assert child.stdout is not None
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if line:
            acknowledged.append(line.strip())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    acknowledged += [line.strip() for line in child.stdout.read().splitlines() if line.strip()]
    child.stdout.close()
    child.stderr.close()  # type: ignore[union-attr]
    assert len(acknowledged) >= 40
    with remindful.open(path, **{"embeddings.backend": "fake"}) as memory:
        got = memory.get_batch(acknowledged)
        assert all(m is not None for m in got)
        memory.search("acknowledged")  # opening the index indexes whatever the crash left behind
        assert memory.flush(timeout=60)  # in the background, once the index is open
        assert memory.index_status().unindexed == 0


def test_kill_9_during_background_vector_deletes_brings_nothing_back(tmp_path: Path) -> None:
    path = tmp_path / "crash-delete"
    child = _child(
        path,
        """
        ids = memory.store_batch([{"content": f"doomed note {i} about the staging server"} for i in range(600)])
        memory.flush()
        memory.delete_many(ids[:500])  # more than INLINE_DELETE: the vectors go in the background
        print(json.dumps(ids), flush=True)
        import time
        time.sleep(60)  # killed while the vectors are (or are about to be) removed
    """,
    )
    assert child.stdout is not None
    ids = json.loads(child.stdout.readline())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stderr.close()  # type: ignore[union-attr]
    doomed, kept = ids[:500], ids[500:]
    with remindful.open(path, **{"embeddings.backend": "fake"}) as memory:
        assert memory.get_batch(doomed) == [None] * 500
        assert memory.search("doomed note staging server", limit=100)  # opens the index...
        found = {h.id for h in memory.search("doomed note staging server", limit=100)}
        assert found and found <= set(kept)  # ...and nothing deleted comes back
        assert memory.flush(timeout=120)
        assert memory.index_status().available, memory.index_status()
        state = memory.engine
        assert state.catalog.read("SELECT count(*) FROM index_deletes")[0][0] == 0
        assert set(state.index.ids("action_memories")) == set(kept)  # type: ignore[union-attr]


def _truncate(path: Path, keep: int = 4096) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def test_corrupted_index_is_detected_backed_up_and_rebuilt(tmp_path: Path, onnx_embedder: Any) -> None:
    path = tmp_path / "corrupt"
    with remindful.open(path, embedder=onnx_embedder) as memory:
        kept = memory.store("The staging database lives on port 5433")
        memory.store("Lunch is at noon on Fridays")
    _truncate(path / "chroma" / "chroma.sqlite3")
    with remindful.open(path, embedder=onnx_embedder) as memory:
        hits = memory.search("which port does the staging database use?")
        assert hits[0].id == kept  # search works from the catalog while the index is down
        status = memory.index_status()
        assert status.available is False and "damaged" in status.error
        assert list(tmp_path.glob("chroma.corrupt-*")) or list(path.glob("chroma.corrupt-*"))
        counts = memory.reindex(reset=True)
        assert counts["action_memories"] == 2
        assert memory.index_status().available is True
        assert memory.search("staging database port")[0].id == kept


def test_store_search_context_on_the_real_model_and_chroma(real_memory: MemoryManager) -> None:
    """The core flow on the real parts: what is stored is found by meaning and given as context."""
    deploy = real_memory.store("The deploy script needs AWS_PROFILE=prod", type="knowledge")
    for text in ("Lunch is at noon on Fridays", "The staging database lives on port 5433", "Bought coffee beans"):
        real_memory.store(text)
    status = real_memory.index_status()
    assert status.available and "Chroma" in str(status.backend), status  # the real vector index
    hits = real_memory.search("how do I deploy?", limit=3)
    assert hits[0].id == deploy and "dense" in hits[0].sources
    context = real_memory.context("how do I deploy?")
    assert "AWS_PROFILE=prod" in context.text
    assert deploy in {hit.id for hit in context.hits}
