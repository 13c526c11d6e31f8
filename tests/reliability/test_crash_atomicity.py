"""Quota eviction commits with the insert it makes room for (issue 15: a kill -9 during a
store_batch at quota lost the evicted memories of a batch that was never stored), and a batch
larger than the quota is refused instead of stored whole."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from remindful.errors import ValidationError
from remindful.testing import catalog_rows, open_fake

QUOTA = {"retention": {"max_items_per_collection": 500}}

KILLED_MID_BATCH = """
import sys, time
from remindful.engine.catalog import Catalog
from remindful.testing import open_fake

memory = open_fake(sys.argv[1], retention={"max_items_per_collection": 500})
memory.store_batch([{"content": f"old note {i}", "type": "action"} for i in range(500)])

def insert_slowly(self, conn, rows):  # the batch's transaction is open here: the parent kills us now
    print("inserting", flush=True)
    time.sleep(60)

Catalog.insert_memories = insert_slowly
memory.store_batch([{"content": f"new note {i}", "type": "action"} for i in range(300)])
"""


@pytest.mark.slow
def test_kill_9_during_a_batch_at_quota_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_BATCH, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        assert line.strip() == "inserting", child.stderr.read()[-2000:]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert catalog_rows(path, "SELECT count(*) FROM memories") == [(500,)]
    assert catalog_rows(path, "SELECT count(*) FROM audit_log WHERE action = 'quota_evict'") == [(0,)]


def test_a_batch_at_quota_evicts_in_its_own_transaction_and_says_so(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store", **QUOTA) as memory:
        memory.store_batch([{"content": f"old note {i}", "type": "action"} for i in range(500)])
        memory.store_batch([{"content": f"new note {i}", "type": "action"} for i in range(300)])
        assert catalog_rows(memory, "SELECT count(*) FROM memories") == [(500,)]
        assert catalog_rows(memory, "SELECT count(*) FROM audit_log WHERE action = 'quota_evict'") == [(300,)]
        assert memory.search("new note 299", limit=1)[0].content == "new note 299"


def test_a_batch_larger_than_the_quota_is_refused_whole(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store", **QUOTA) as memory:
        memory.store_batch([{"content": f"old note {i}", "type": "action"} for i in range(10)])
        with pytest.raises(ValidationError, match=r"Invalid 'items': at most 500 action memories .* got 600"):
            memory.store_batch([{"content": f"new note {i}", "type": "action"} for i in range(600)])
        assert catalog_rows(memory, "SELECT count(*) FROM memories") == [(10,)]
