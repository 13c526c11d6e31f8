"""``remindful hook <event>``: the fast path a coding agent runs at each hook event.

Reads the agent's hook JSON on stdin, prepares and redacts a spool record, commits it in one
short SQLite transaction and exits. It imports only the standard library (plus PyYAML when a
config file exists): no numpy, pydantic, chromadb or onnxruntime. SessionStart and
UserPromptSubmit then print relevant memories as ``hookSpecificOutput.additionalContext`` (asked
of the running daemon, else read from the store directly).

Exit codes follow Claude Code's hook contract: 0 always for capture (a hook never blocks or
breaks the agent: an internal error is logged to ``<storage>/logs/hooks.log`` and stderr), 1 (a
non-blocking error shown to the user) for unusable input such as a missing ``session_id``
(spec ERR-P1-03: "session_id is required for memory capture"). Never 2, which would block.
"""

from __future__ import annotations

import json
import os
import re  # json imports it anyway
import sys
import time

from remindful.config_defaults import CONFIG_FILE, STORAGE_PATH, default, setting
from remindful.engine import spool
from remindful.services.ingest.events import CONTEXT_EVENTS, HookInputError, build_record, idem_key, normalize_event

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

    from remindful.services.ingest.filters import CaptureFilter

USAGE = "usage: remindful [--path DIR] hook EVENT < hook.json   (EVENT: SessionStart, PreToolUse, ...)"


# -- configuration without pydantic -------------------------------------------------------------


def light_config(path: str | None) -> tuple[str, dict[str, Any]]:
    """The storage path and the ``memory:`` settings as a plain dict, from the same sources as
    :func:`remindful.config.load_settings` (``--path``, ``REMINDFUL_*``, ``MEMORY_STORAGE_PATH``,
    the YAML file). Only the capture settings are validated, by the hook
    (:meth:`~remindful.services.ingest.filters.FilterConfig.from_mapping`); the store owner
    validates the rest. A setting missing from the dict has its default (read it with
    :func:`remindful.config_defaults.setting`).

    Raises ValueError (naming the file and the expected form) when ``$REMINDFUL_CONFIG`` names no
    file, or the file is unreadable, not YAML, or not a mapping with a ``memory:`` mapping: a hook
    never captures with defaults in place of a config it could not read."""
    memory: dict[str, Any] = {}
    named = os.environ.get("REMINDFUL_CONFIG")
    config_file = os.path.expanduser(named or CONFIG_FILE)
    if named and not os.path.isfile(config_file):
        raise ValueError(f"REMINDFUL_CONFIG: {config_file} is not a file; expected the path of a YAML file")
    if os.path.isfile(config_file):
        import yaml

        try:
            with open(config_file, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            reason = " ".join(str(exc).split())
            raise ValueError(f"config file {config_file}: {reason}; expected a readable YAML file") from None
        loaded = {} if loaded is None else loaded
        section = loaded.get("memory", {}) if isinstance(loaded, dict) else None
        if not isinstance(section, dict | None):
            raise ValueError(f"config file {config_file}: expected a mapping with a 'memory:' mapping")
        memory = section or {}
    for key, raw in os.environ.items():
        if not key.startswith("REMINDFUL_") or key == "REMINDFUL_CONFIG":
            continue
        parts = key[len("REMINDFUL_") :].lower().split("__")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        target = memory
        for part in parts[:-1]:
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                nxt = target[part] = {}
            target = nxt
        target[parts[-1]] = value
    raw_storage = memory.get("storage")
    storage_cfg: dict[str, Any] = raw_storage if isinstance(raw_storage, dict) else {}
    chosen = (
        path
        or os.environ.get("REMINDFUL_STORAGE__PATH")
        or os.environ.get("MEMORY_STORAGE_PATH")
        or storage_cfg.get("path")
        or STORAGE_PATH
    )
    return os.path.expanduser(os.path.expandvars(str(chosen))), memory


def hook_log(storage: str, level: str, message: str) -> None:
    """One line to ``<storage>/logs/hooks.log`` (0600) and to stderr; never raises."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} {message}\n"
    sys.stderr.write(f"remindful: {message}\n")
    try:
        logs = os.path.join(storage, "logs")
        os.makedirs(logs, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(logs, "hooks.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


# -- the hook -----------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> tuple[str | None, str | None, dict[str, Any]]:
    """``[--path P] [-v] hook EVENT [--path P] [--no-context]`` → (path, event, options)."""
    path: str | None = None
    event: str | None = None
    options: dict[str, Any] = {"context": True}
    args = list(argv)
    i = 0
    seen_hook = False
    while i < len(args):
        arg = args[i]
        if arg in ("--path", "-p") and i + 1 < len(args):
            path = args[i + 1]
            i += 2
            continue
        if arg.startswith("--path="):
            path = arg.split("=", 1)[1]
        elif arg == "--no-context":
            options["context"] = False
        elif arg in ("-v", "--verbose"):
            options["verbose"] = True
        elif arg == "hook" and not seen_hook:
            seen_hook = True
        elif not arg.startswith("-") and seen_hook and event is None:
            event = arg
        i += 1
    return path, event, options


def run(argv: list[str], stdin: Any = None, stdout: Any = None) -> int:
    """Handle one hook invocation; returns the process exit code (see the module docstring)."""
    started = time.monotonic()
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    path, event_arg, options = parse_args(argv)
    from remindful.services.ingest.filters import CaptureFilter, FilterConfig

    storage: str | None = None
    try:
        storage, memory = light_config(path)
        flt = CaptureFilter(FilterConfig.from_mapping(memory))
        if flt.redactor is not None:
            flt.redactor.check()  # a user pattern that does not compile is a config error, now
    except Exception as exc:  # fail closed: never capture with defaults in place of a broken config
        if storage is None:  # the config that names the storage path is the broken one
            chosen = path or os.environ.get("REMINDFUL_STORAGE__PATH") or os.environ.get("MEMORY_STORAGE_PATH")
            storage = os.path.expanduser(os.path.expandvars(chosen or STORAGE_PATH))
        hook_log(storage, "ERROR", f"config invalid, nothing captured: {exc}")
        return 0
    counts: dict[str, int] = {}
    try:
        payload = _read_payload(stdin, _payload_limit(memory))
        event = normalize_event(event_arg or str(payload.get("hook_event_name") or ""))
        record, warnings = build_record(event, payload, time.time(), flt.redactor, counts)
    except PayloadTooLarge as exc:  # refused up front: never spooled to fail at every drain
        hook_log(storage, "WARNING", f"nothing captured: {exc}")
        return 0
    except HookInputError as exc:
        hook_log(storage, "ERROR", str(exc))
        return 1
    except Exception as exc:
        hook_log(storage, "ERROR", f"hook failed before spooling: {type(exc).__name__}: {exc}")
        return 0
    for warning in warnings:
        hook_log(storage, "WARNING", warning)
    captured = False
    try:
        captured = _spool(storage, flt, counts, event, payload, record)
    except Exception as exc:
        hook_log(storage, "ERROR", f"could not spool the {event} event: {type(exc).__name__}: {exc}")
    if event in CONTEXT_EVENTS and options["context"] and captured is not None:
        deadline = CONTEXT_DEADLINE_S.get(event, 1.5)
        try:
            if not _print_context(started + deadline, storage, memory, event, payload, stdout, path):
                hook_log(
                    storage,
                    "WARNING",
                    f"no context for {event}: not ready within {deadline:g} s of the hook's start (a timeout would "
                    "lose it anyway); `remindful daemon` keeps the model and the index loaded and answers at once",
                )
        except Exception as exc:
            hook_log(storage, "ERROR", f"context injection failed: {type(exc).__name__}: {exc}")
    return 0


#: Seconds from a hook's start by which its context must be ready, well inside the timeout that
#: ``install-hooks`` writes (2 s for UserPromptSubmit, as the spec asks; 5 s for SessionStart):
#: an answer after the timeout is lost, and the agent waited for it. Without a daemon the hook loads
#: the model, and for a store of more than ``HOOK_EXACT_MAX`` memories (services/context.py) the
#: vector index too (a smaller one is scored exactly from the catalog), which a busy machine can
#: take longer than that to do: the hook then prints none (and logs why) rather than time out.
CONTEXT_DEADLINE_S = {"UserPromptSubmit": 1.5, "SessionStart": 4.0}


def _print_context(
    deadline: float, storage: str, memory: dict[str, Any], event: str, payload: dict[str, Any], stdout: Any, path: Any
) -> bool:
    """Print the context if it is ready by ``deadline`` (``time.monotonic()``); False if it was not
    (the work goes on in a daemon thread that the process's exit ends)."""
    import threading

    from remindful.services.context import hook_context

    outcome: list[BaseException | None] = []
    given_up = False
    lock = threading.Lock()

    def work() -> None:
        try:
            text = hook_context(storage, memory, event, payload, path)
        except BaseException as exc:
            outcome.append(exc)
            return
        with lock:  # printed whole before the caller returns, or not at all
            if not given_up:
                _write_context(stdout, event, text)
                outcome.append(None)

    worker = threading.Thread(target=work, name="remindful-hook-context", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    with lock:
        if not outcome:
            given_up = True
            return False
    if outcome[0] is not None:
        raise outcome[0]
    return True


TOO_DEEP = "hook input: the JSON on stdin is nested too deeply; expected a hook JSON object"


class PayloadTooLarge(Exception):
    """The hook's stdin is larger than ``limits.hook_payload_bytes``."""


def _payload_limit(memory: dict[str, Any]) -> int:
    value = setting(memory, "limits.hook_payload_bytes")
    return value if type(value) is int and value > 0 else int(default("limits.hook_payload_bytes"))


def _read_payload(stdin: Any, limit: int) -> dict[str, Any]:
    """The JSON object on ``stdin``, read up to ``limit`` bytes: a larger payload raises
    PayloadTooLarge once the rest is read and dropped (the agent writing it never sees a broken pipe)."""
    if hasattr(stdin, "isatty") and stdin.isatty():
        raise HookInputError("hook input: expected the agent's hook JSON on stdin. " + USAGE)
    raw = getattr(stdin, "buffer", None)
    data: str | bytes = raw.read(limit + 1) if raw is not None else stdin.read(limit + 1)
    if len(data) > limit:
        size = len(data)
        while chunk := (raw.read(1 << 20) if raw is not None else stdin.read(1 << 20)):
            size += len(chunk)
        raise PayloadTooLarge(
            f"hook input of {size:,} bytes is over limits.hook_payload_bytes ({limit:,}); "
            "raise the limit in the config to capture such events"
        )
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        payload = json.loads(text) if text.strip() else None
    except RecursionError:
        raise HookInputError(TOO_DEEP) from None
    except ValueError as exc:  # not UTF-8, not JSON, an integer of thousands of digits
        raise HookInputError(f"hook input: expected a JSON object on stdin ({exc})") from None
    if not isinstance(payload, dict):
        raise HookInputError("hook input: expected a JSON object on stdin with session_id and hook_event_name")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        try:
            payload = _without_lone_surrogates(payload)
        except RecursionError:
            raise HookInputError(TOO_DEEP) from None
    return payload


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with each lone UTF-16 surrogate (a ``\\ud800`` escape in the JSON, which cannot
    be written as UTF-8) replaced by U+FFFD, so that the rest of the event is captured."""
    if isinstance(value, str):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value) if _has_surrogate(value) else value
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _spool(
    storage: str,
    flt: CaptureFilter,
    redacted: dict[str, int],
    event: str,
    payload: dict[str, Any],
    record: dict[str, Any],
) -> Any:
    """Filter, redact and commit the record (``redacted``: the hits of the redaction that ran
    while it was built). Returns True if spooled, False if filtered, None if the session is
    excluded (then nothing at all is written for it, not even context)."""
    from remindful.engine.redact import add_counts

    if not flt.config.memory_enabled:
        return None
    counts: dict[str, int] = {}
    kept = []
    excluded = None
    for item in record["memories"]:
        result = flt.check(item["content"], trigger="hooks", session_id=record["session_id"], metadata=item["metadata"])
        if result.allowed:
            kept.append({**item, "content": result.content, "metadata": result.metadata})
            counts.update({f"redacted_{k}": counts.get(f"redacted_{k}", 0) + v for k, v in result.redactions.items()})
        else:
            counts[f"skipped_{result.code}"] = counts.get(f"skipped_{result.code}", 0) + 1
            excluded = excluded or (result.reason if result.code == "excluded" else None)
    if excluded is None and flt.excluded_session(record["session_id"]) is not None:
        excluded = f"privacy exclusion: session {record['session_id']!r}"
    if excluded is not None:  # nothing of an excluded session is written, not even its session record
        kept = []
        record.pop("session", None)
    capture_on = flt.config.enabled and flt.config.triggers.get("hooks", True)
    if kept:
        for name, n in redacted.items():
            counts[f"redacted_{name}"] = counts.get(f"redacted_{name}", 0) + n
    record["memories"] = kept
    if "session" in record and flt.redactor is not None:
        record["session"] = flt.redactor.redact_value(record["session"], counts)
    if not capture_on:
        record.pop("session", None)
    if not kept and "session" not in record and not counts:
        return None if excluded is not None else False
    key = idem_key(event, payload)
    body = json.dumps(record, ensure_ascii=False, default=str)
    try:
        conn = spool.connect(storage)
        _OPEN.append(conn)
    except Exception:
        spool.write_fallback(storage, {"idem_key": key, "kind": event, "payload": body, "created_at": record["at"]})
        return True
    try:
        for attempt in range(2):
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if kept or "session" in record:
                        conn.execute(INSERT_SQL, (key, event, body, record["at"], key))
                    add_counts(conn, counts)
                    if excluded is not None:
                        conn.execute(
                            "INSERT INTO audit_log (at, action, memory_id, detail) VALUES (?,?,?,?)",
                            (time.time(), "capture_excluded", None, json.dumps({"reason": excluded, "event": event})),
                        )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                break
            except Exception as exc:
                if attempt == 0 and "no such table" in str(exc):  # no catalog yet, or an old one
                    spool.ensure_tables(conn)
                    continue
                if excluded is None:
                    spool.write_fallback(
                        storage, {"idem_key": key, "kind": event, "payload": body, "created_at": record["at"]}
                    )
                    hook_log(storage, "WARNING", f"catalog busy ({exc}); event kept in {spool.FALLBACK_NAME}")
                break
    finally:
        if not KEEP_OPEN:
            _OPEN.remove(conn)
            conn.close()
    return None if excluded is not None else bool(kept or "session" in record)


INSERT_SQL = spool.INSERT_SQL
#: The console script leaves its connection open and ends with ``os._exit``: closing the last
#: connection to a WAL database checkpoints it (an fsync that would double a hook's time). The
#: committed transaction is in the WAL file; the next connection sees it.
KEEP_OPEN = False
_OPEN: list[Any] = []


def _write_context(stdout: Any, event: str, text: str) -> None:
    if text:
        out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
        stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        stdout.flush()


def main(argv: list[str] | None = None) -> None:
    """The process entry: run, flush, and exit without closing the catalog (see KEEP_OPEN)."""
    global KEEP_OPEN
    KEEP_OPEN = True
    code = run(sys.argv[1:] if argv is None else argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


__all__ = ["light_config", "main", "parse_args", "run"]
