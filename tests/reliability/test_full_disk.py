"""A full disk is a full disk, and a read-only store can still be read (issue 28 items 7 and 8).

On a full disk the index was treated as damaged: it stayed off until `reindex --reset`, four
`chroma.corrupt-*` copies were written onto the full disk, the indexer logged tracebacks ("cannot
rollback - no transaction is active"), search said "no relevant memories" for exact matches, and
`remindful token` left an empty `http_token` after which every HTTP surface refused to start. A
read-only store refused even reads, and `doctor` there failed with "unexpected OSError".

A real small disk: a tmpfs mounted for the test (root only), real processes, the real embedded
Chroma, the fake embedder (speed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from requirements import is_root, requires
from small_disk import fill, mounted
from store_processes import cli

pytestmark = [
    pytest.mark.slow,
    requires(is_root(), "root (to mount a small tmpfs)"),
]

BUILD = """
import sys, remindful
with remindful.open(sys.argv[1]) as m:
    m.store_batch([{"content": f"note {i} about deploying service {i % 7} to the cluster"} for i in range(1100)])
    m.store("the quokka is a small marsupial that lives on Rottnest island")
"""
QUOKKA = "quokka marsupial island"

#: A process that has the store open while the disk fills up (what a server lives through).
RUNNING = r"""
import json, os, sys, logging, remindful
logging.basicConfig(level=logging.WARNING)
store, filler = sys.argv[1], sys.argv[2]
m = remindful.open(store)
m.store("warm up the writer")
m.flush(60)
stat = os.statvfs(filler.rsplit("/", 1)[0])
with open(filler, "wb") as fh:  # room for a few memories in the catalog, none for the index
    fh.write(b"\0" * (stat.f_bavail * stat.f_frsize - 400_000))
errors, stored = [], []
for i in range(60):
    try:
        stored.append(m.store(f"zebra crossing number {i} " * 400))
        m.flush(30)
    except remindful.RemindfulError as exc:
        errors.append(type(exc).__name__ + ": " + str(exc))
hits = [h.content for h in m.search("quokka marsupial island", limit=3)]
os.unlink(filler)
after = m.store("after the disk had room again: the walrus")
m.flush(60)
found = [h.id for h in m.search("walrus", limit=3)]
status = m.index_status()
m.close()
print(json.dumps({"errors": errors, "stored": stored, "hits": hits, "after": after, "found": found,
                  "available": status.available, "unindexed": status.unindexed}))
"""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk", "24m") as mount:
        yield mount


def build(env: dict[str, str], store: Path) -> None:
    done = subprocess.run([sys.executable, "-c", BUILD, str(store)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_a_full_disk_says_so_keeps_searching_copies_nothing_and_recovers(disk: Path, env: dict[str, str]) -> None:
    store = disk / "store"
    build(env, store)
    filler = fill(disk)

    stored = cli(env, store, "store", "a long note about the zebra crossing " * 2000)
    lines = [x for x in stored.stderr.splitlines() if x.strip()]
    assert stored.returncode == 1, stored.stdout + stored.stderr
    assert "Traceback" not in stored.stderr and "cannot rollback" not in stored.stderr
    assert lines[-1].startswith("error: Storage full") and "disk is full" in lines[-1], lines

    found = cli(env, store, "search", QUOKKA, "--json")  # was "no relevant memories"
    assert found.returncode == 0, found.stderr
    assert "quokka" in json.loads(found.stdout)["memories"][0]["content"]
    assert "Traceback" not in found.stderr

    token = cli(env, store, "token")
    assert token.returncode == 1 and "Storage full" in token.stderr, token.stderr
    assert not (store / "http_token").exists()  # was left empty: every HTTP surface refused to start

    assert not list(disk.glob("store/chroma.corrupt-*"))  # was 4 copies, onto the full disk
    assert not (store / "chroma" / "remindful-damage.json").exists()  # not recorded as damage

    backup = cli(env, store, "backup")  # was "unexpected OperationalError: database or disk is full"
    assert backup.returncode == 1 and backup.stderr.splitlines()[-1].startswith("error: Storage full"), backup.stderr
    assert not list((store / "backups").iterdir())  # no archive, no staging copy left

    exported = cli(env, store, "export", str(disk / "memories.json"))  # was "Invalid 'output_path' …"
    said = [x for x in exported.stderr.splitlines() if x.strip()]
    assert exported.returncode == 1 and said[-1].startswith("error: Storage full"), exported.stderr
    assert "export" in said[-1] and "Traceback" not in exported.stderr
    assert not list(disk.glob("memories.json*"))  # no partial export left

    filler.unlink()
    again = cli(env, store, "store", "stored once the disk had room: the walrus")
    assert again.returncode == 0, again.stderr
    status = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, remindful\n"
            "with remindful.open(sys.argv[1]) as m:\n"
            "    s = m.index_status()\n"
            "    counts = {k: v['count'] for k, v in m.stats().to_dict()['collections'].items()}\n"
            "    in_index = m.engine.index.count('action_memories')\n"
            "    print(json.dumps([s.available, s.unindexed, sum(counts.values()), in_index]))",
            str(store),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    available, unindexed, total, in_index = json.loads(status.stdout)
    assert available and unindexed == 0 and in_index == total == 1102  # the index is on: no reindex --reset
    assert len(cli(env, store, "token").stdout.strip()) > 20
    assert cli(env, store, "doctor").returncode == 0


def test_a_process_that_lives_through_a_full_disk_searches_and_catches_up(disk: Path, env: dict[str, str]) -> None:
    store = disk / "store"
    build(env, store)
    done = subprocess.run(
        [sys.executable, "-c", RUNNING, str(store), str(disk / "filler")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["errors"], "the disk never filled"
    assert report["stored"], "nothing was stored: the index never had to cope with a full disk"
    assert all(e.startswith("StorageFullError: Storage full") for e in report["errors"]), report["errors"]
    assert "quokka" in report["hits"][0]  # search answered from what it could read
    assert report["found"][0] == report["after"]
    assert report["available"] and report["unindexed"] == 0  # indexed once there was room
    assert "Traceback" not in done.stderr and "cannot rollback" not in done.stderr, done.stderr[-3000:]
    assert not list(disk.glob("store/chroma.corrupt-*"))


@pytest.fixture
def read_only_store(tmp_path: Path, env: dict[str, str]) -> Iterator[Path]:
    source = tmp_path / "store"
    done = cli(env, source, "store", "a memory to read back from a read-only store")
    assert done.returncode == 0, done.stderr
    view = tmp_path / "read-only"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def test_a_read_only_store_is_read_and_says_why_it_cannot_be_written(
    read_only_store: Path, env: dict[str, str]
) -> None:
    listed = cli(env, read_only_store, "list", "--json")
    assert listed.returncode == 0, listed.stderr  # refused before: "Memory features are disabled"
    assert [m["content"] for m in json.loads(listed.stdout)] == ["a memory to read back from a read-only store"]
    found = cli(env, read_only_store, "search", "read back", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["count"] == 1, found.stderr
    assert cli(env, read_only_store, "stats").returncode == 0

    stored = cli(env, read_only_store, "store", "anything")
    assert stored.returncode == 1
    assert stored.stderr.splitlines()[-1].startswith("error: the storage directory") and "read-only" in stored.stderr
    assert "Traceback" not in stored.stderr and "deletions left" not in stored.stderr

    doctor = cli(env, read_only_store, "doctor", "--json")  # was "unexpected OSError"
    assert doctor.returncode == 1, doctor.stderr
    report = {c["part"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert not report["storage directory"]["ok"] and "not writable" in report["storage directory"]["detail"]
    assert report["catalog"]["ok"] and report["vector index"]["ok"], report
