"""Trust nothing another user can plant (issue 32, item 4): what remindful creates is private
whatever the umask (tried under umask 000), and a config, cache or store another user owns or can
write, or a link another user made, is refused with one line naming the path and the fix.

The second user is real: the tests run as root and act as ``nobody`` through ``runuser``. Outside
root they are skipped, except in CI (``CI=true``), where not being root fails them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from requirements import is_root, requires

SCRIPT = str(Path(sys.executable).with_name("remindful"))

second_user = requires(is_root(), "root (runuser, to act as a second user)")


#: The system's interpreter: nobody cannot reach this venv's (under root's home).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"


def as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` (standard library only) as the user nobody."""
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", SYSTEM_PYTHON, "-I", "-c", code], capture_output=True, text=True
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the second user can reach (pytest's tmp_path is root's alone): its HOME for the
    victim (root here) is ``shared/home``."""
    top = Path(tempfile.mkdtemp(prefix="remindful-2u-", dir="/tmp"))
    top.chmod(0o755)
    (top / "home").mkdir(mode=0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def remindful(
    home: Path, *args: str, umask: int | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("REMINDFUL_", "XDG_")) and k != "MEMORY_STORAGE_PATH"
    }
    env.update(HOME=str(home), REMINDFUL_EMBEDDINGS__BACKEND="fake")
    prefix = (
        []
        if umask is None
        else [sys.executable, "-c", f"import os, sys; os.umask({umask}); os.execv(sys.argv[1], sys.argv[1:])"]
    )
    return subprocess.run([*prefix, SCRIPT, *args], capture_output=True, text=True, env=env, cwd=cwd or home)


# -- modes whatever the umask ----------------------------------------------------------------------


def test_what_remindful_creates_is_private_under_umask_000(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    assert remindful(home, "install-hooks", umask=0, cwd=project).returncode == 0
    assert remindful(home, "install-hooks", "--user", umask=0, cwd=project).returncode == 0
    stored = remindful(home, "store", "a first memory", umask=0)
    assert stored.returncode == 0, stored.stderr
    for more in (("backup",), ("export",)):
        done = remindful(home, *more, umask=0)
        assert done.returncode == 0, done.stderr
    hook = json.dumps(
        {"session_id": "s1", "cwd": str(project), "prompt": "hello", "hook_event_name": "UserPromptSubmit"}
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMINDFUL_", "XDG_", "MEMORY_STORAGE"))}
    env.update(HOME=str(home), REMINDFUL_EMBEDDINGS__BACKEND="fake")
    umasked = "import os, sys; os.umask(0); os.execv(sys.argv[1], sys.argv[1:])"
    fired = subprocess.run(
        [sys.executable, "-c", umasked, SCRIPT, "hook", "UserPromptSubmit", "--no-context"],
        input=hook,
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
    )
    assert fired.returncode == 0, fired.stderr
    assert mode(project / ".claude") == 0o700
    assert mode(project / ".claude" / "settings.local.json") == 0o600
    assert mode(home / ".claude") == 0o700
    assert mode(home / ".claude" / "settings.json") == 0o600
    assert mode(home / ".remindful") == 0o700
    store = home / ".remindful" / "memory"
    assert mode(store) == 0o700
    loose = [f"{p} {oct(mode(p))}" for p in [store, *store.rglob("*")] if mode(p) & 0o077 and not p.is_symlink()]
    assert loose == []


def test_the_mcp_manifest_cache_is_private_under_umask_000(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    code = (
        "import os; os.umask(0)\n"
        "from remindful.shells.mcp import manifest\n"
        "manifest.write({'format': 0})\n"
        "print(manifest.manifest_file())\n"
    )
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    written = Path(done.stdout.strip())
    assert mode(home / ".cache") == 0o700 and mode(home / ".cache" / "remindful") == 0o700
    assert mode(written) == 0o600


# -- what another user planted ---------------------------------------------------------------------


@second_user
def test_a_config_another_user_planted_is_refused(shared: Path) -> None:
    home = shared / "home"
    (home / ".remindful").mkdir(mode=0o700)
    (home / ".remindful").chmod(0o777)  # as umask 000 made it before
    planted = as_nobody(
        f"open({str(home / '.remindful' / 'config.yaml')!r}, 'w').write("
        "'memory:\\n  learning:\\n    llm:\\n      base_url: http://attacker.example/v1\\n')"
    )
    assert planted.returncode == 0, planted.stderr
    config = home / ".remindful" / "config.yaml"
    done = remindful(home, "config", "--json")
    assert done.returncode != 0 and "attacker.example" not in done.stdout
    line = done.stderr.strip()
    assert "\n" not in line
    assert f"{config} is owned by another user" in line and f"mv {config} {config}.untrusted" in line
    os.chown(config, 0, 0)  # the user's own file, in a directory others can write
    done = remindful(home, "config", "--json")
    assert done.returncode != 0 and "attacker.example" not in done.stdout
    assert f"{home / '.remindful'} is writable by other users" in done.stderr
    assert f"chmod o-w {home / '.remindful'}" in done.stderr
    (home / ".remindful").chmod(0o700)
    assert remindful(home, "config", "--json").returncode == 0  # checked, and the user's: read


@second_user
def test_a_store_another_user_made_is_refused(shared: Path) -> None:
    home = shared / "home"
    (home / ".remindful").mkdir(mode=0o777)
    (home / ".remindful").chmod(0o777)
    made = as_nobody(f"import os; os.mkdir({str(home / '.remindful' / 'memory')!r}, 0o777)")
    assert made.returncode == 0, made.stderr
    (home / ".remindful").chmod(0o755)
    done = remindful(home, "store", "the prod password hint")
    assert done.returncode != 0
    assert "\n" not in done.stderr.strip()  # one line: the path, why, the fix
    assert f"storage directory {home / '.remindful' / 'memory'} is owned by another user" in done.stderr
    assert not (home / ".remindful" / "memory" / "catalog.sqlite3").exists()
    # A hook says so in one line, exits 0 (never blocks the agent) and writes nothing there, not a log.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMINDFUL_", "XDG_", "MEMORY_STORAGE"))}
    env.update(HOME=str(home), REMINDFUL_EMBEDDINGS__BACKEND="fake")
    event = json.dumps(
        {"session_id": "s1", "cwd": str(home), "prompt": "my plan", "hook_event_name": "UserPromptSubmit"}
    )
    fired = subprocess.run([SCRIPT, "hook", "UserPromptSubmit"], input=event, capture_output=True, text=True, env=env)
    assert fired.returncode == 0
    assert fired.stderr.count("\n") == 1 and "is owned by another user (uid" in fired.stderr
    assert list((home / ".remindful" / "memory").iterdir()) == []


@second_user
def test_a_planted_catalog_link_is_not_followed(shared: Path) -> None:
    home = shared / "home"
    store = home / ".remindful" / "memory"
    assert remindful(home, "store", "first").returncode == 0
    (store / "catalog.sqlite3").unlink()
    for suffix in ("-wal", "-shm"):
        (store / f"catalog.sqlite3{suffix}").unlink(missing_ok=True)
    drop = shared / "drop"
    drop.mkdir(mode=0o777)
    drop.chmod(0o777)
    made = as_nobody(f"import os; os.symlink({str(drop / 'theirs.sqlite3')!r}, {str(drop / 'link')!r})")
    assert made.returncode == 0, made.stderr
    os.rename(drop / "link", store / "catalog.sqlite3")  # as if the attacker could reach the store
    done = remindful(home, "store", "the victim's secret plan")
    assert done.returncode != 0
    assert "catalog.sqlite3 is a symbolic link" in done.stderr or "symbolic link another user" in done.stderr
    assert not (drop / "theirs.sqlite3").exists()


@second_user
def test_no_other_user_can_hold_the_daemon_lock(shared: Path) -> None:
    home = shared / "home"
    assert remindful(home, "store", "first").returncode == 0
    store = home / ".remindful" / "memory"
    held = as_nobody(
        "import fcntl, os, sys\n"
        f"fd = os.open({str(store / 'daemon.lock')!r}, os.O_RDONLY | os.O_CREAT, 0o644)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('held')\n"
    )
    assert held.returncode != 0 and "held" not in held.stdout
    assert "Permission denied" in held.stderr
    from remindful import runtime

    fd = runtime.claim_daemon_lock(str(store))
    assert fd is not None
    os.close(fd)


@second_user
def test_a_swapped_cache_is_not_read_into_the_tool_descriptions(shared: Path) -> None:
    home = shared / "home"
    cache = home / ".cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)  # as umask 000 made it before
    find = (
        f"import json, os; os.environ['HOME'] = {str(home)!r}; os.environ.pop('XDG_CACHE_HOME', None)\n"
        "from remindful.shells.mcp import manifest\n"
        "print(json.dumps([manifest.manifest_file(), manifest.built_from()]))\n"
    )
    found = subprocess.run([sys.executable, "-c", find], capture_output=True, text=True, check=True)
    path, built = json.loads(found.stdout)
    tools = [{"name": "memory_search", "description": "ATTACKER TEXT"}]
    data = json.dumps(dict(built, initialize={}, handshake_versions=["x"], tools=tools))
    plant = f"import os; os.makedirs(os.path.dirname({path!r}), exist_ok=True); open({path!r}, 'w').write({data!r})"
    planted = as_nobody(plant)
    assert planted.returncode == 0, planted.stderr
    check = (
        f"import os; os.environ['HOME'] = {str(home)!r}; os.environ.pop('XDG_CACHE_HOME', None)\n"
        "from remindful.shells.mcp import manifest\n"
        "print(manifest.load())\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "None"
    assert f"{cache} is writable by other users" in done.stderr or "another user" in done.stderr


# -- the rules, one by one ---------------------------------------------------------------------------------


@second_user
def test_what_problem_says_of_each_kind_of_path(shared: Path) -> None:
    from remindful.owned import problem

    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    assert problem(mine) is None
    assert problem(shared / "missing") is None
    mine.chmod(0o707)
    assert problem(mine) == ("is writable by other users", f"chmod o-w {mine}")
    mine.chmod(0o770)
    os.chown(mine, 0, 65534)  # a group of others (nogroup), not the owner's private group
    assert problem(mine) == ("is writable by its group", f"chmod g-w {mine}")
    os.chown(mine, 0, 0)
    mine.chmod(0o700)
    theirs = shared / "theirs"
    theirs.symlink_to(mine)
    os.lchown(theirs, 65534, 65534)  # a link another user made, to a directory of ours
    assert problem(theirs) is not None and "symbolic link another user (uid 65534) made" in problem(theirs)[0]
    ours = shared / "ours"
    ours.symlink_to(mine)
    assert problem(ours) is None  # the user's own link to the user's own directory
    sticky = Path("/tmp")
    assert stat.S_IMODE(sticky.stat().st_mode) & stat.S_ISVTX and problem(sticky) is None


@second_user
def test_a_storage_link_another_user_planted_is_refused(shared: Path) -> None:
    home = shared / "home"
    (home / ".remindful").mkdir(mode=0o700)
    elsewhere = shared / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = home / ".remindful" / "memory"
    link.symlink_to(elsewhere)
    os.lchown(link, 65534, 65534)
    done = remindful(home, "store", "the victim's plan")
    assert done.returncode != 0
    assert f"{link} is a symbolic link another user (uid 65534) made" in done.stderr
    assert list(elsewhere.iterdir()) == []


@second_user
def test_claude_settings_another_user_can_write_are_refused(shared: Path) -> None:
    """Whoever can rewrite a hook command runs code as the user: install-hooks will not write
    into (or trust) a settings file or directory another user owns or can write."""
    home = shared / "home"
    claude = home / ".claude"
    claude.mkdir(mode=0o777)
    claude.chmod(0o777)
    planted = as_nobody(f"open({str(claude / 'settings.json')!r}, 'w').write('{{}}')")
    assert planted.returncode == 0, planted.stderr
    done = remindful(home, "install-hooks", "--user")
    assert done.returncode != 0
    assert f"{claude} is writable by other users" in done.stderr and f"chmod o-w {claude}" in done.stderr
    claude.chmod(0o755)
    done = remindful(home, "install-hooks", "--user")
    assert done.returncode != 0
    assert f"{claude / 'settings.json'} is owned by another user" in done.stderr
    assert (claude / "settings.json").read_text() == "{}"
