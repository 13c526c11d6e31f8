"""Scopes: the project resolver, the user-level rules (both ways), selections, and the scope filter
through the library's writes and reads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.engine.projects import Project, Resolver, slug
from remindful.engine.scopes import USER, parse_selection, user_level, visible_from
from remindful.errors import ValidationError
from remindful.index.memory import InMemoryIndex
from remindful.testing import open_fake


def git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
    )


def repository(path: Path) -> Path:
    """A git repository at ``path`` with one commit (a worktree needs one)."""
    path.mkdir(parents=True)
    git("init", "-q", cwd=path)
    git("commit", "-q", "--allow-empty", "-m", "start", cwd=path)
    return path


def worktree(repo: Path, path: Path) -> Path:
    git("worktree", "add", "-q", "-b", path.name, str(path), cwd=repo)
    return path


# -- the resolver ----------------------------------------------------------------------------------


def test_a_repository_is_one_project_from_any_of_its_folders(tmp_path: Path) -> None:
    repo = repository(tmp_path / "code" / "projA")
    (repo / "src" / "deep").mkdir(parents=True)
    resolve = Resolver()
    project = resolve(repo)
    assert project is not None
    assert project.name == "projA" and project.root == str(repo.resolve())
    assert project.key.startswith("proja-") and len(project.key) == len("proja-") + 8
    assert project.scope == f"project:{project.key}"
    assert resolve(repo / "src" / "deep") == project
    assert Resolver()(repo / "src") == project  # the key is stable across processes


def test_the_worktrees_of_one_repository_are_one_project(tmp_path: Path) -> None:
    repo = repository(tmp_path / "projA")
    tree = worktree(repo, tmp_path / "projA-feature")
    (tree / "lib").mkdir()
    resolve = Resolver()
    assert resolve(tree) == resolve(repo)
    assert resolve(tree / "lib").root == str(repo.resolve())  # shown as the main work tree


def test_two_repositories_of_one_name_are_two_projects(tmp_path: Path) -> None:
    first = repository(tmp_path / "a" / "app")
    second = repository(tmp_path / "b" / "app")
    resolve = Resolver()
    assert resolve(first).name == resolve(second).name == "app"
    assert resolve(first).key != resolve(second).key


def test_a_submodule_is_a_project_of_its_own(tmp_path: Path) -> None:
    outer = repository(tmp_path / "outer")
    inner = outer / "vendor" / "lib"
    inner.mkdir(parents=True)
    modules = outer / ".git" / "modules" / "lib"
    modules.mkdir(parents=True)
    (inner / ".git").write_text(f"gitdir: {os.path.relpath(modules, inner)}\n")
    resolve = Resolver()
    assert resolve(inner).name == "lib"
    assert resolve(inner) != resolve(outer)


def test_a_marker_names_a_project_and_beats_git(tmp_path: Path) -> None:
    repo = repository(tmp_path / "checkout-2")
    (repo / ".remindful").write_text("# remindful\nproject = Billing Service\n")
    other = repository(tmp_path / "billing-old")
    (other / ".remindful").write_text('project: "billing service"\n')
    resolve = Resolver()
    assert resolve(repo) == Project("billing-service", "Billing Service", str(repo.resolve()))
    assert resolve(other).key == "billing-service"  # two checkouts named alike: one project
    plain = tmp_path / "notes"
    plain.mkdir()
    (plain / ".remindful").write_text("")  # a marker naming nothing: its directory is a project
    (plain / "sub").mkdir()
    assert resolve(plain / "sub").root == str(plain.resolve())


def test_a_directory_named_dot_remindful_is_no_marker(tmp_path: Path, isolated_env: Path) -> None:
    (isolated_env / ".remindful" / "memory").mkdir(parents=True)  # the default storage's parent
    work = isolated_env / "scratch"
    work.mkdir()
    assert Resolver()(work).root == str(work.resolve())


def test_settings_name_directories_and_can_fix_the_project(tmp_path: Path) -> None:
    repo = repository(tmp_path / "repo")
    (repo / "docs").mkdir()
    named = Resolver(names={str(repo / "docs"): "handbook"})
    assert named(repo / "docs").key == "handbook"
    assert named(repo) != named(repo / "docs")
    fixed = Resolver(fixed="Everything")
    assert fixed(repo) == fixed(tmp_path) == fixed(None) == Project.named("Everything")


def test_home_and_root_are_no_project_and_a_plain_folder_is_its_own(tmp_path: Path, isolated_env: Path) -> None:
    resolve = Resolver()
    assert resolve(isolated_env) is None
    assert resolve("/") is None
    assert resolve(None) is None
    plain = isolated_env / "downloads" / "stuff"
    plain.mkdir(parents=True)
    assert resolve(plain) == Project.at(str(plain.resolve()), "stuff", str(plain.resolve()))
    assert resolve(plain) != resolve(plain.parent)


def test_a_dotfiles_repository_at_home_is_no_project(isolated_env: Path) -> None:
    git("init", "-q", cwd=isolated_env)
    folder = isolated_env / "projects" / "loose"
    folder.mkdir(parents=True)
    resolve = Resolver()
    assert resolve(isolated_env) is None
    assert resolve(folder).root == str(folder.resolve())  # not the home's repository


def test_slug_keeps_keys_plain() -> None:
    assert slug("  My Project (v2)! ") == "my-project-v2"
    assert slug("über") == "ber"
    with pytest.raises(ValueError, match="letters or digits"):
        Project.named("!!!")


# -- the user-level rules ----------------------------------------------------------------------------

USER_LEVEL = [
    ("I prefer tabs over spaces", "knowledge", "manual"),
    ("Always answer in English", "knowledge", "manual"),
    ("Never add emojis to commit messages", "conversation", "hook"),
    ("From now on, never apologise in your answers", "conversation", "hook"),
    ("Don't use var in JavaScript", "knowledge", "manual"),
    ("User prefers dark mode.", "knowledge", "config"),
    ("User instruction: Always write docstrings in the imperative.", "knowledge", "conversation"),
    ("User instruction: From now on, never put emojis in commit messages.", "knowledge", "conversation"),
    ("User prefers short answers without preamble.", "knowledge", "conversation"),
    ("The user prefers a formal greeting over 'hey dude'.", "knowledge", "correction"),  # an LLM's lesson
    ("In every project, keep the virtualenv in .venv", "knowledge", "manual"),
    ("I never want force pushes", "knowledge", "manual"),
    ("Whatever the project, write commit messages in English", "knowledge", "manual"),
    ("Never print secrets in logs", "knowledge", "manual"),  # no one's business but a rule for everywhere
    ("Always use TypeScript strict mode", "knowledge", "manual"),  # a language, not a name
]

PROJECT_LEVEL = [
    ("We use pnpm, not npm", "knowledge", "manual"),  # we: the team, the project
    ("Always run pytest -x in this repo", "knowledge", "manual"),  # this repo
    ("Never edit src/app.py by hand", "knowledge", "manual"),  # a path
    ("Always restart the worker after editing config.yaml", "knowledge", "manual"),  # a file
    ("The staging database listens on port 5433", "knowledge", "manual"),  # a place
    ("Never deploy on Fridays", "knowledge", "manual"),  # an environment
    ("Always call http://localhost:8080/health first", "knowledge", "manual"),  # a URL
    ("Our API uses API keys, not OAuth.", "knowledge", "correction"),  # a project's fact
    ("Pnpm install, not npm.", "knowledge", "correction"),  # a correction of a fact
    ('Use "pnpm install" rather than "npm i".', "knowledge", "correction"),  # wording or a command?
    ('Use "Hello" rather than "Hey dude".', "knowledge", "correction"),  # the words do not say
    ("What port does staging use?", "conversation", "hook"),  # a question
    ("Always use the billing queue for refunds", "knowledge", "manual"),  # the project's name
    ("I prefer tabs over spaces", "action", "hook"),  # a tool call is the project's
    ("Never add emojis to commit messages", "conversation", "response"),  # the assistant's answer
    ("I prefer tabs over spaces", "document", "file"),  # a file's text
    ("Melanie loves painting.", "knowledge", "conversation"),  # not a rule
    ("Fix the failing login test", "conversation", "hook"),  # a task
    ("Love and acceptance really can be found everywhere.", "conversation", "hook"),  # chat, not a rule
    ("In general the build is slow on Mondays", "knowledge", "manual"),
    ("Never mention the Acme merger outside this repo", "knowledge", "manual"),  # a confidential matter
    ("Never mention the Acme merger", "knowledge", "manual"),
    ("Always keep the NDA terms to yourself", "knowledge", "manual"),
    ("Never share Globex's numbers with anyone", "knowledge", "manual"),  # a customer's name
    ("Always call it Project Falcon in commit messages", "knowledge", "manual"),  # a project's name
    ("I never discuss the pricing of our deals", "knowledge", "conversation"),
]


@pytest.mark.parametrize(("text", "memory_type", "source"), USER_LEVEL)
def test_preferences_and_rules_that_hold_everywhere_are_the_users(text: str, memory_type: str, source: str) -> None:
    assert user_level(text, type=memory_type, source=source, metadata={"role": "user"}, project_name="projA")


@pytest.mark.parametrize(("text", "memory_type", "source"), PROJECT_LEVEL)
def test_what_is_about_one_project_stays_there(text: str, memory_type: str, source: str) -> None:
    role = "assistant" if source == "response" else "user"
    assert user_level(text, type=memory_type, source=source, metadata={"role": role}, project_name="billing") is None


def test_a_hook_prompt_is_the_users_only_when_the_user_said_it() -> None:
    rule = "Never add emojis to commit messages"
    assert user_level(rule, type="conversation", source="hook", metadata={"role": "user"})
    assert user_level(rule, type="conversation", source="hook", metadata={}) is None


# -- selections ----------------------------------------------------------------------------------


def test_selections() -> None:
    here = Project("proja-12345678", "projA", "/x")
    known = {"projb": "project:projb-87654321"}
    parse = lambda value: parse_selection(value, current=here, lookup=known.get)  # noqa: E731
    assert parse("all") is None
    assert parse("user") == (USER,)
    assert parse("project") == (here.scope,)
    assert parse("here") == (here.scope, USER) == visible_from(here)
    assert parse("project:projb,user") == ("project:projb-87654321", USER)
    assert parse(["unscoped", "user", "user"]) == (None, USER)
    assert parse(here) == (here.scope,)
    assert visible_from(None) == (USER, None)
    with pytest.raises(ValueError, match="no project 'nope'"):
        parse("project:nope")
    with pytest.raises(ValueError, match="expected all, user"):
        parse("everything")
    with pytest.raises(ValueError, match="runs in none"):
        parse_selection("project", current=None, lookup=known.get)


# -- the library ---------------------------------------------------------------------------------


def test_a_memory_goes_where_it_was_captured_and_reads_see_their_scope(tmp_path: Path) -> None:
    a, b = repository(tmp_path / "projA"), repository(tmp_path / "projB")
    with open_fake(tmp_path / "s") as memory:
        pnpm = memory.store("We use pnpm to install packages", type="knowledge", metadata={"cwd": str(a / "web")})
        port = memory.store("The database port is 5433", type="knowledge", metadata={"cwd": str(b)})
        tabs = memory.store("I prefer tabs over spaces in every file", type="knowledge", metadata={"cwd": str(a)})
        loose = memory.store("The build cache lives in the usual folder", type="knowledge")
        scope_a, scope_b = memory.project_of(a).scope, memory.project_of(b).scope
        assert [memory.get(i).scope for i in (pnpm, port, tabs, loose)] == [scope_a, scope_b, USER, None]
        # A library manager of no project reads every memory, as before scopes.
        assert {h.id for h in memory.search("pnpm port tabs build", limit=10)} == {pnpm, port, tabs, loose}
        seen = {h.id for h in memory.search("pnpm port tabs build", limit=10, scope=memory.seen_from(b))}
        assert seen == {port, tabs}
        assert {m.id for m in memory.list(scope="user")} == {tabs}
        assert {m.id for m in memory.list(scope="unscoped")} == {loose}
        assert {m.id for m in memory.list(scope="project:projA")} == {pnpm}
        assert [h.scope for h in memory.search("pnpm", limit=1, scope=scope_a)] == [scope_a]
        context = memory.context("pnpm port tabs build", scope=memory.seen_from(a / "web"))
        assert {h.id for h in context.hits} == {pnpm, tabs}
        usage = {u.scope: u for u in memory.scopes()}
        assert usage[scope_a].name == "projA" and usage[scope_a].root == str(a.resolve())
        assert (usage["user"].count, usage["unscoped"].count, usage[scope_b].count) == (1, 1, 1)


def test_a_manager_working_in_a_project_reads_it_and_the_user_and_writes_there(tmp_path: Path) -> None:
    a, b = repository(tmp_path / "projA"), repository(tmp_path / "projB")
    with open_fake(tmp_path / "s", project=b) as other:
        other.store("Project B talks to the payments gateway", type="knowledge")
    with open_fake(tmp_path / "s", project=a) as memory:
        assert memory.project == memory.project_of(a)
        fact = memory.store("Project A renders with server components", type="knowledge")
        rule = memory.store("Never use emojis in commit messages", type="knowledge")
        kept = memory.store("Never use emojis in commit messages either", type="knowledge", scope="project")
        assert memory.get(fact).scope == memory.project.scope
        assert memory.get(rule).scope == USER and memory.get(kept).scope == memory.project.scope
        found = {h.content for h in memory.search("project components gateway emojis", limit=10)}
        assert "Project B talks to the payments gateway" not in found
        assert {"Project A renders with server components", "Never use emojis in commit messages"} <= found
        everything = {h.content for h in memory.search("project gateway", limit=10, scope="all")}
        assert "Project B talks to the payments gateway" in everything
        moved = memory.update(fact, scope="project:projB")
        assert moved.scope == memory.project_of(b).scope
        assert fact not in {h.id for h in memory.search("server components", limit=10)}
        assert memory.stats(scope="project:projB").scope == {
            "selection": memory.project_of(b).scope,
            "memories": 2,
            "by_type": {"knowledge": 2},
        }


def test_a_manager_in_no_project_sees_the_user_and_the_unscoped(tmp_path: Path, isolated_env: Path) -> None:
    repo = repository(tmp_path / "projA")
    with open_fake(tmp_path / "s") as memory:
        memory.store("Repository A's secret handshake is blue", type="knowledge", metadata={"cwd": str(repo)})
        memory.store("The printer on floor two jams often", type="knowledge")
        assert memory.work_in(isolated_env) is None
        found = {h.content for h in memory.search("handshake printer", limit=10)}
        assert found == {"The printer on floor two jams often"}
        with pytest.raises(ValidationError, match="runs in none"):
            memory.store("x", scope="project")


def test_bad_scopes_name_the_field(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        with pytest.raises(ValidationError, match="scope"):
            memory.search("x", scope="everything")
        with pytest.raises(ValidationError, match="no project 'ghost'"):
            memory.list(scope="project:ghost")
        with pytest.raises(ValidationError, match="scope"):
            memory.store("x", scope="team")
        with pytest.raises(ValidationError, match=r"items\[1\]\.scope"):
            memory.engine.store_batch([{"content": "a"}, {"content": "b", "scope": "project:Not A Key"}])
        stored = memory.store("A memory of a project named on the fly", scope="project:Side Quest")
        assert memory.get(stored).scope == "project:side-quest"
        assert memory.list(scope="project:Side Quest")[0].id == stored


def test_the_user_level_rules_can_be_turned_off(tmp_path: Path) -> None:
    repo = repository(tmp_path / "projA")
    with open_fake(tmp_path / "s", project=repo, **{"scopes.user_level": False}) as memory:
        rule = memory.store("Never use emojis in commit messages", type="knowledge")
        assert memory.get(rule).scope == memory.project.scope
        assert memory.user_level("Never use emojis in commit messages") is None


def test_dedup_keeps_each_projects_copy(tmp_path: Path) -> None:
    a, b = repository(tmp_path / "projA"), repository(tmp_path / "projB")
    with open_fake(tmp_path / "s") as memory:
        text = "Run the migrations before starting the server"
        ids = [memory.store(text, type="knowledge", metadata={"cwd": str(where)}) for where in (a, a, b)]
        report = memory.dedup(threshold=0.95)
        assert report.to_dict()["deleted"] == 1
        left = {m.id: m.scope for m in memory.list(limit=10)}
        assert ids[2] in left and len(left) == 2
        assert set(left.values()) == {memory.project_of(a).scope, memory.project_of(b).scope}


def test_export_and_import_keep_scopes_and_an_old_export_gets_them(tmp_path: Path) -> None:
    a = repository(tmp_path / "projA")
    with open_fake(tmp_path / "one") as memory:
        memory.store("projA builds with make", type="knowledge", metadata={"cwd": str(a)})
        memory.store("Never use tabs", type="knowledge")
        memory.store("A loose note", type="knowledge")
        exported = memory.export(output_path=tmp_path / "all.json")
        expected = {m.content: m.scope for m in memory.list(limit=10)}
    with open_fake(tmp_path / "two") as memory:
        memory.import_memories(exported.path)
        assert {m.content: m.scope for m in memory.list(limit=10)} == expected
    data = json.loads(Path(exported.path).read_text())
    for record in data["memories"]:
        del record["scope"]  # an export made before scopes
    (tmp_path / "old.json").write_text(json.dumps(data))
    with open_fake(tmp_path / "three") as memory:
        memory.import_memories(tmp_path / "old.json")
        assert {m.content: m.scope for m in memory.list(limit=10)} == expected
    data["memories"][0]["scope"] = "team"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with open_fake(tmp_path / "four") as memory, pytest.raises(ValidationError, match=r"memories\[0\]\.scope"):
        memory.import_memories(tmp_path / "bad.json")


def test_the_memories_of_a_scope_move_together(tmp_path: Path) -> None:
    # After an upgrade, the memories that named no directory are unscoped: a project's clients do
    # not see them until they are given a project (or the user's scope), all at once.
    a = repository(tmp_path / "projA")
    with open_fake(tmp_path / "s") as memory:
        loose = [memory.store(f"Old note {i} about the build cache", type="knowledge") for i in range(3)]
        pnpm = memory.store("We use pnpm to install packages", type="knowledge", metadata={"cwd": str(a)})
        scope_a = memory.project_of(a).scope
        memory.work_in(a)
        assert not {h.id for h in memory.search("old note build cache", limit=10)} & set(loose)
        assert memory.move_scope("unscoped", "project") == 3
        assert {memory.get(i).scope for i in loose} == {scope_a} and memory.get(pnpm).scope == scope_a
        assert set(loose) <= {h.id for h in memory.search("old note build cache", limit=10)}
        assert {u.scope: u.count for u in memory.scopes()} == {scope_a: 4}
        assert memory.move_scope("unscoped", "user") == 0
        assert memory.move_scope(f"{scope_a},user", "user") == 4
        assert {u.scope: u.count for u in memory.scopes()} == {"user": 4}
        assert memory.move_scope("user", "project:Side Quest") == 4
        assert {u.scope: u.count for u in memory.scopes()} == {"project:side-quest": 4}
        with pytest.raises(ValidationError, match="from"):
            memory.move_scope("all", "user")
        with pytest.raises(ValidationError, match="scope"):
            memory.move_scope("unscoped", "team")


class AskedIndex(InMemoryIndex):
    """The in-memory index, keeping how many candidates each query asked for and every metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []
        self.given: list[dict[str, Any]] = []

    def upsert(self, collection: str, ids: Any, embeddings: Any, metadatas: Any) -> None:
        self.given += [dict(m) for m in metadatas]
        super().upsert(collection, ids, embeddings, metadatas)

    def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
        self.asked.append(k)
        return super().query(collection, embedding, k)


def test_a_scope_filters_what_the_vector_index_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The index holds no scope (ids, vectors and fixed-vocabulary columns only): past EXACT_ALWAYS
    # rows, a scope's search asks it, unfiltered, and keeps the candidates the catalog passes.
    from remindful.engine.retrieval import search

    index = AskedIndex()
    with open_fake(tmp_path / "s", index=index, **{"performance.async_indexing": False}) as memory:
        for scope in ("project:alpha", "project:beta"):
            memory.store_batch(
                [{"content": f"deploy note {i} of {scope}", "type": "knowledge", "scope": scope} for i in range(1200)]
            )
        assert memory.flush()
        assert index.given and all(set(m) <= {"source", "memory_class", "created_at"} for m in index.given)
        monkeypatch.setattr(search, "_exact", lambda *a: pytest.fail("scored exactly, not through the index"))
        index.asked.clear()
        hits = memory.search("deploy note of the project", limit=10, scope="project:alpha", min_score=0)
        assert len(hits) == 10 and {h.scope for h in hits} == {"project:alpha"}
        assert index.asked and max(index.asked) >= 10 * memory.settings.search.candidates  # the ten-fold at least
