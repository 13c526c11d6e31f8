"""Restore, clear-all and reindex --reset while another process has the store open and writes
(issue 28 item 4): `serve` running, `remindful restore A.tar.gz --yes` in another shell, then 30
acknowledged `memory_store` calls, and a fresh process found 0 of 30 (the catalog and its
-wal/-shm were swapped under open connections) while `doctor` said healthy; two restores at once
failed with a raw chromadb "attempt to write a readonly database".

Real processes: a writer holding the store open (the role of `serve`), the CLI for the rest;
the real embedded Chroma, the fake embedder (speed).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remindful.engine.storelock import StoreLock
from store_processes import cli

pytestmark = pytest.mark.slow

WRITER = r"""
import json, os, random, sys, remindful
WORDS = (
    "amber basil cedar delta ember fjord grove harbor iris juniper kelp lotus maple nectar opal pine "
    "quartz raven sage tulip umber violet willow yarrow"
).split()
def note(tag, i):
    # Words of its own beside the shared ones: the fake embedder's vectors of "{tag} note number
    # {i}" alone are all at one distance from each other, and HNSW cannot reach some of such
    # points whatever the process (in one process, 342 of 1,222 of them; of 2,760 LoCoMo turns
    # with the real model, none): the search below then missed its note by meaning about once in
    # twenty runs.
    return f"{tag} note number {i}: " + " ".join(random.Random(f"{tag} {i}").sample(WORDS, 4))
with remindful.open(sys.argv[1]) as m:
    print(json.dumps(["ready", m.store("warm up the writer", type="knowledge")]), flush=True)
    for line in sys.stdin:
        cmd, tag, arg = line.split()
        if cmd == "store":
            for i in range(int(arg)):
                print(json.dumps([tag, m.store(note(tag, i), type="knowledge")]), flush=True)
        elif cmd == "until":  # store until the file `arg` exists
            i = 0
            while not os.path.exists(arg):
                print(json.dumps([tag, m.store(note(tag, i), type="knowledge")]), flush=True)
                i += 1
        elif cmd == "search":  # once what this process stored is indexed (its own flush: no timed wait)
            assert m.flush(300), "the writer's own stores were not indexed within 300 s"
            hits = m.search(note(tag, int(arg)), limit=3)
            print(json.dumps(["hits", [[h.id, sorted(h.sources)] for h in hits]]), flush=True)
        print(json.dumps(["done", tag]), flush=True)
"""

CHECK = r"""
import json, sys, remindful
with remindful.open(sys.argv[1]) as m:
    ids = json.loads(sys.stdin.read())
    found = [i for i, got in zip(ids, m.get_batch(ids)) if got is not None]
    status = m.index_status()
    stats = m.stats().to_dict()
    print(json.dumps({
        "found": found,
        "all": [x.id for x in m.list(limit=10000)],
        "unindexed": status.unindexed,
        "available": status.available,
        "counts": {k: v["count"] for k, v in stats["collections"].items()},
    }))
"""


class Writer:
    """A process that keeps the store open and stores on command (what `serve` does)."""

    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        tag, _ = self._line()
        assert tag == "ready"

    def _line(self) -> list[Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the writer died: {self.proc.stderr.read() if self.proc.stderr else ''}")
        return list(json.loads(line))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def collect(self) -> tuple[list[str], Any]:
        """The ids acknowledged until the command is done (and a search's hits, if any)."""
        ids: list[str] = []
        hits = None
        while True:
            tag, value = self._line()
            if tag == "done":
                return ids, hits
            if tag == "hits":
                hits = value
            else:
                ids.append(value)

    def close(self) -> str:
        _out, err = self.proc.communicate(timeout=120)  # closes its stdin: the writer stops
        assert self.proc.returncode == 0, err
        return str(err)


@pytest.fixture
def writer_factory(env: dict[str, str]) -> Iterator[Any]:
    started: list[Writer] = []

    def start(path: Path) -> Writer:
        writer = Writer(path, env)
        started.append(writer)
        return writer

    yield start
    for writer in started:
        if writer.proc.returncode is None:
            writer.proc.kill()
            writer.proc.communicate()


def check(env: dict[str, str], path: Path, ids: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(path)], input=json.dumps(ids), capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def ids_in_archive(archive: Path, tmp: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        tar.extract("catalog.sqlite3", tmp, filter="data")
    conn = sqlite3.connect(tmp / "catalog.sqlite3")
    try:
        return {row[0] for row in conn.execute("SELECT id FROM memories")}
    finally:
        conn.close()


def make_archive(env: dict[str, str], path: Path) -> tuple[Path, list[str]]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, remindful\n"
            "with remindful.open(sys.argv[1]) as m:\n"
            "    ids = [m.store(f'archived fact number {i}', type='knowledge') for i in range(5)]\n"
            "    print(json.dumps([m.backup(name='A').path, ids]))",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    archive, ids = json.loads(done.stdout)
    return Path(archive), ids


def test_writes_acknowledged_after_a_restore_by_another_process_are_kept(
    tmp_path: Path, env: dict[str, str], writer_factory: Any
) -> None:
    store = tmp_path / "store"
    archive, archived = make_archive(env, store)
    writer = writer_factory(store)
    writer.send("store before 3")
    before, _ = writer.collect()

    flag = tmp_path / "restored"
    writer.send(f"until during {flag}")  # stores all through the restore
    restored = cli(env, store, "restore", str(archive), "--yes", "--json")
    flag.touch()
    during, _ = writer.collect()
    assert restored.returncode == 0, restored.stderr
    auto_backup = Path(json.loads(restored.stdout)["backup_path"])

    writer.send("store after 30")
    after, _ = writer.collect()
    writer.send("search after 17")
    _, hits = writer.collect()
    assert hits and hits[0][0] == after[17], hits  # the writer's own search sees what it stored
    writer.close()

    found = check(env, store, after)
    assert found["found"] == after  # was 0 of 30
    assert found["unindexed"] == 0 and found["available"]
    assert sum(found["counts"].values()) == len(found["all"])  # the index holds every row
    # Each memory acknowledged during the restore is in the restored store or in the automatic
    # backup taken before it: none fell between the two.
    kept = set(found["all"]) | ids_in_archive(auto_backup, tmp_path / "auto")
    assert set(during) <= kept
    assert set(before) <= ids_in_archive(auto_backup, tmp_path / "auto2")
    assert set(archived) <= set(found["all"])
    assert not set(before) & set(found["all"])  # the restore did replace the old content
    assert during, "the writer stored nothing during the restore"
    doctor = cli(env, store, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_a_second_restore_while_one_runs_is_refused_clearly(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "store"
    archive, _ = make_archive(env, store)
    with StoreLock(store).maintenance("restore"):  # what a running restore holds
        done = cli(env, store, "restore", str(archive), "--yes")
    assert done.returncode == 1
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, done.stderr
    assert "Cannot restore now: a restore (process " in lines[0] and "is running on this store" in lines[0]
    assert cli(env, store, "restore", str(archive), "--yes").returncode == 0  # once it is over


def test_two_restores_at_once_serialise(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "store"
    archive, archived = make_archive(env, store)
    command = [sys.executable, "-m", "remindful.shells.entry", "--path", str(store), "restore", str(archive), "--yes"]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in "ab"
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errors, strict=True)]
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        assert "readonly database" not in err and "Traceback" not in err, err
        if code != 0:
            assert "Cannot restore now" in err and "is running on this store" in err, err
    found = check(env, store, archived)
    assert found["found"] == archived and len(found["all"]) == len(archived)
    assert found["unindexed"] == 0 and sum(found["counts"].values()) == len(archived)


def test_writes_around_a_clear_all_by_another_process_are_kept_or_backed_up(
    tmp_path: Path, env: dict[str, str], writer_factory: Any
) -> None:
    store = tmp_path / "store"
    make_archive(env, store)
    writer = writer_factory(store)
    flag = tmp_path / "cleared"
    writer.send(f"until during {flag}")
    cleared = cli(env, store, "clear-all", "--yes", "--json")
    flag.touch()
    during, _ = writer.collect()
    assert cleared.returncode == 0, cleared.stderr
    backup = Path(json.loads(cleared.stdout)["backup_path"])
    writer.send("store after 30")
    after, _ = writer.collect()
    writer.send("search after 11")
    _, hits = writer.collect()
    assert hits and hits[0][0] == after[11], hits
    writer.close()

    found = check(env, store, after)
    assert found["found"] == after
    assert set(during) <= set(found["all"]) | ids_in_archive(backup, tmp_path / "b")
    assert set(found["all"]) <= set(during) | set(after)  # everything older was cleared
    assert found["unindexed"] == 0 and sum(found["counts"].values()) == len(found["all"])


def test_a_reset_reindex_by_another_process_loses_no_vector(
    tmp_path: Path, env: dict[str, str], writer_factory: Any
) -> None:
    store = tmp_path / "store"
    make_archive(env, store)
    writer = writer_factory(store)
    flag = tmp_path / "reindexed"
    writer.send(f"until during {flag}")
    reset = cli(env, store, "reindex", "--reset")
    flag.touch()
    during, _ = writer.collect()
    assert reset.returncode == 0, reset.stderr
    writer.send("store after 20")
    after, _ = writer.collect()
    writer.send("search after 13")
    _, hits = writer.collect()
    assert hits and hits[0][0] == after[13] and "dense" in hits[0][1], hits
    writer.close()

    found = check(env, store, during + after)
    assert found["found"] == during + after
    assert found["unindexed"] == 0 and sum(found["counts"].values()) == len(found["all"])
    assert cli(env, store, "doctor").returncode == 0


def test_a_restore_waits_for_a_write_in_progress(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "store"
    archive, _ = make_archive(env, store)
    lock = StoreLock(store)
    with lock.shared():  # a write transaction of another process, in progress
        proc = subprocess.Popen(
            [sys.executable, "-m", "remindful.shells.entry", "--path", str(store), "restore", str(archive), "--yes"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        generation = lock.generation()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)  # the restore validates, then waits for this write
            if (store / "store.gate").exists() and _gate_taken(store):
                break
        assert proc.poll() is None, proc.communicate()
        assert lock.generation() == generation  # nothing replaced yet
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert lock.generation() > generation


def _gate_taken(store: Path) -> bool:
    import fcntl

    fd = os.open(store / "store.gate", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
