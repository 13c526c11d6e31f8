"""One "machine" of the real-path PostgreSQL fault test (``tests/reliability/test_postgres_writers.py``):
its own storage directory and spool, a store on the shared catalog (``catalog.url``) and the Chroma
server, as every shell opens it. For ``SECONDS`` it spools prompts through the hook (acknowledged
once the hook returns: the local spool committed them) and stores a memory directly now and then
(acknowledged once ``store`` returned its id), while a thread drains the spool as the daemon does;
then it drains until nothing waits. Every acknowledgement is a line in the ``acks`` file; every
refusal one line on stderr. Run as ``python pg_writer.py NAME STORE URL CHROMA_HOST CHROMA_PORT
SECONDS ACKS``; exits 0 once its spool is empty."""

from __future__ import annotations

import io
import json
import sys
import threading
import time

import remindful
from remindful.errors import StorageError
from remindful.shells.hook import run
from remindful.testing import FakeEmbedder

PAUSE_S = 0.05
FINAL_DRAIN_S = 180.0


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def main(name: str, store: str, url: str, host: str, port: int, seconds: float, acks: str) -> int:
    manager = remindful.open(
        store,
        embedder=FakeEmbedder(),
        **{"catalog.url": url, "storage.chromadb.mode": "server", "storage.chromadb.host": host,
           "storage.chromadb.port": port},
    )  # fmt: skip
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                manager.drain_spool()
            except Exception as exc:  # the server is down: the events wait in the spool
                print(f"{name}: drain failed: {first_line(exc)}", file=sys.stderr, flush=True)
                stop.wait(0.5)
            stop.wait(0.1)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    n = 0
    deadline = time.monotonic() + seconds
    with open(acks, "a", encoding="utf-8") as ack:
        while time.monotonic() < deadline:
            prompt = f"note {n} from {name}: the nightly export of shard {n} runs at {n % 24:02d}:15"
            payload = {"session_id": f"sess-{name}", "prompt": prompt, "cwd": store}
            if run(
                ["--path", store, "hook", "UserPromptSubmit", "--no-context"], stdin=io.StringIO(json.dumps(payload))
            ):
                print(f"{name}: hook failed for note {n}", file=sys.stderr, flush=True)
            else:
                ack.write(json.dumps({"spooled": prompt}) + "\n")
            if n % 5 == 0:
                content = f"fact {n} from {name}: replica {n} lags by {n % 7} seconds"
                try:
                    mid = manager.store(content, type="knowledge")
                except StorageError as exc:
                    print(f"{name}: store refused: {first_line(exc)}", file=sys.stderr, flush=True)
                else:
                    ack.write(json.dumps({"stored": mid, "content": content}) + "\n")
            ack.flush()
            n += 1
            time.sleep(PAUSE_S)
    stop.set()
    drainer.join()
    deadline = time.monotonic() + FINAL_DRAIN_S
    while time.monotonic() < deadline:
        try:
            manager.drain_spool()
            if not manager.engine.captures.spool_waiting(5):
                break
        except Exception as exc:
            print(f"{name}: drain failed: {first_line(exc)}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    empty = not manager.engine.captures.spool_waiting(5)
    manager.close()
    return 0 if empty else 1


if __name__ == "__main__":
    a = sys.argv
    sys.exit(main(a[1], a[2], a[3], a[4], int(a[5]), float(a[6]), a[7]))
