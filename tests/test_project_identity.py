"""One definition of a project (:mod:`remindful.engine.projects`) for everything that keys on one:
a memory's scope, a hook memory's ``project_id``, the ledger of injected context and the
``hooks.projects`` settings; and a project's name and root never reach disk with a secret in them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from remindful.api import MemoryManager
from remindful.services.context import hook_request
from remindful.shells.hook import run
from remindful.testing import catalog_rows, open_fake

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
AWS = "AKIAQWERTYUIOPASDFGH"


def shop_in_a_repository(tmp_path: Path) -> tuple[Path, Path]:
    """A git repository holding a directory whose ``.remindful`` marker names the project "shop"."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    shop = repo / "shop"
    shop.mkdir()
    (shop / ".remindful").write_text("project = shop\n")
    return repo, shop


def capture(store: Path, cwd: Path) -> None:
    """A PostToolUse hook fired in ``cwd`` (spooled, as the hook process does)."""
    data = json.loads((FIXTURES / "PostToolUse.json").read_text())
    data.update(cwd=str(cwd), transcript_path=str(FIXTURES / "transcript.jsonl"))
    argv = ["--path", str(store), "hook", "PostToolUse", "--no-context"]
    assert run(argv, stdin=io.StringIO(json.dumps(data)), stdout=io.StringIO()) == 0


def decide(memory: MemoryManager, text: str, cwd: Path) -> None:
    memory.store(text, type="knowledge", metadata={"cwd": str(cwd), "category": "decision"})


def brief(memory: MemoryManager, cwd: Path) -> str:
    return memory.hook_context(hook_request("SessionStart", {"session_id": "sess-1", "cwd": str(cwd)}, None)).text


def test_a_marked_project_is_one_project_for_its_scope_its_captures_its_ledger_and_its_settings(
    tmp_path: Path,
) -> None:
    repo, shop = shop_in_a_repository(tmp_path)
    store = tmp_path / "s"
    capture(store, shop / "src")
    with open_fake(store) as memory:
        project = memory.project_of(shop / "src")
        assert project is not None and project.scope == "project:shop"
        memory.drain_spool()
        (captured,) = memory.list(session_id="sess-abc123", limit=10)
        assert captured.scope == "project:shop"
        assert captured.metadata["project_id"] == project.key == "shop"
        decide(memory, "We decided to ship the shop on Fridays.", shop / "src")
        assert "Fridays" in brief(memory, shop)
        injection = memory.stats().injection
        assert injection is not None
        assert [row["project"] for row in injection["by_project"]] == ["shop"]
    # hooks.projects names it: by its name, its key or its root directory (settings written as paths)
    for pattern in ("shop", "sh*", str(shop)):
        with open_fake(store, **{"hooks.projects": {pattern: {"inject": False}}}) as memory:
            assert brief(memory, shop / "src") == "", pattern
    # ... and not the repository around it, another project
    with open_fake(store, **{"hooks.projects": {"shop": {"inject": False}}}) as memory:
        decide(memory, "We decided to build the repository with make.", repo)
        assert "make" in brief(memory, repo)
    with open_fake(store, **{"hooks.projects": {str(repo): {"inject": False}}}) as memory:
        assert brief(memory, shop) != ""


def test_a_repositorys_project_is_keyed_alike_everywhere(tmp_path: Path) -> None:
    """A plain repository (no marker): the key, not the path, in project_id and the ledger; a
    worktree's captures are the repository's project."""
    repo = tmp_path / "app"
    (repo / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    tree = tmp_path / "app-wt"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {repo / '.git' / 'worktrees' / 'wt'}\n")
    store = tmp_path / "s"
    capture(store, tree)
    with open_fake(store) as memory:
        project = memory.project_of(repo)
        assert project is not None and memory.project_of(tree) == project
        memory.drain_spool()
        (captured,) = memory.list(session_id="sess-abc123", limit=10)
        assert captured.scope == project.scope and captured.metadata["project_id"] == project.key
        decide(memory, "We decided to deploy the app on Fridays.", repo)
        assert "Fridays" in brief(memory, tree)
        injection = memory.stats().injection
        assert injection is not None and [r["project"] for r in injection["by_project"]] == [project.key]


def test_a_secret_in_a_projects_directory_never_reaches_disk(tmp_path: Path) -> None:
    secret_dir = tmp_path / f"deploy-{AWS}"
    named = tmp_path / "named"
    for directory in (secret_dir, named):
        directory.mkdir()
    (named / ".remindful").write_text(f"project = release {AWS}\n")
    store = tmp_path / "s"
    with open_fake(store) as memory:
        for directory in (secret_dir, named):
            memory.store("We deploy on Fridays.", type="knowledge", metadata={"cwd": str(directory)})
        memory.flush()
        rows: list[Any] = catalog_rows(memory, "SELECT name, root FROM projects")
        assert len(rows) == 2
        for name, root in rows:
            assert AWS not in name and AWS not in root
    data = b"".join(p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file())
    assert AWS.encode() not in data and AWS.lower().encode() not in data  # nor in a key (a scope)


def test_a_reader_in_a_recorded_project_needs_no_secret_detector(tmp_path: Path) -> None:
    """A project's name and root as the catalog recorded them were written redacted, so they are
    their own clean form: a process that works in a recorded project's directory and only reads
    does not load detect-secrets (0.2 s of every command's start) and finds the project's memories
    under the same key. A directory not recorded still goes through the redaction (the test above)."""
    import subprocess
    import sys

    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    store = str(tmp_path / "s")
    opened = f"remindful.open({store!r}, project={str(project)!r}, embedder=FakeEmbedder(), index=InMemoryIndex())"
    head = "import sys, remindful\nfrom remindful.testing import FakeEmbedder, InMemoryIndex\n"
    write = f"{head}with {opened} as m:\n    m.store('We ship on Fridays.', type='knowledge')\n    print(m.project.key)"
    read = (
        f"{head}with {opened} as m:\n"
        "    found = [h.content for h in m.search('when do we ship', min_score=0)] + [x.content for x in m.list()]\n"
        "    print(m.project.key, found, 'detect_secrets' in sys.modules)\n"
    )
    run = {"capture_output": True, "text": True, "check": True, "timeout": 120}
    key = subprocess.run([sys.executable, "-c", write], **run).stdout.strip()
    assert key.startswith("shop-")
    assert subprocess.run([sys.executable, "-c", read], **run).stdout.strip() == (
        f"{key} ['We ship on Fridays.', 'We ship on Fridays.'] False"
    )
