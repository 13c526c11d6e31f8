"""``remindful hook <event>``: the process a coding agent runs at each hook event.

Reads the agent's hook JSON on stdin, turns it into a redacted spool record
(:mod:`remindful.services.ingest.events`), commits it in one short SQLite transaction
(:func:`remindful.services.ingest.hooks.spool_record`) and exits. It imports only the standard
library (plus PyYAML when a config file exists): no numpy, pydantic, chromadb or onnxruntime. The
settings come from the sources every process reads (:mod:`remindful.config_sources`); the capture
settings are validated here by the model's rules (:meth:`~remindful.services.ingest.filters.FilterConfig.from_mapping`).
SessionStart and UserPromptSubmit then print relevant memories as
``hookSpecificOutput.additionalContext``: the store's daemon's answer on its Unix socket, else the
store's own (:func:`context_text`), if ready by :data:`CONTEXT_DEADLINE_S`.

Nothing here drains the spool: the daemon does. The console script (:func:`main`) starts it,
detached, when none runs (:func:`start_daemon_for`), so that hooks alone close the loop: what one
session captured is stored within a second and found by the next prompt. The specification's verbs
(``session start|end``, ``capture-memory --source hook|response``, ``inject-context``) are aliases
of ``hook EVENT`` (:data:`ALIASES`).

A package of its own, beside the console script's dispatcher (:mod:`remindful.shells.entry`) and the
typer app (:mod:`remindful.shells.cli`, whose ``hook`` command serves ``--help`` and in-process
callers): both use it, and it uses neither.

The event is spooled before anything else (a hook killed at its timeout while it looks for
context has kept it). An event no file can take (a full disk) is handed to the running daemon, which
keeps it in memory until the spool takes it (:func:`keep_elsewhere`). A PreToolUse for a call that
failed before in its project, and has not succeeded since, prints a warning as its
``additionalContext`` (:func:`failure_warning_for`). An input over ``limits.hook_payload_bytes`` (up
to :data:`OVERSIZED_READ_FACTOR` times it) is kept, redacted whole, then cut and marked truncated.

Exit codes follow Claude Code's hook contract: 0 for capture (a hook never blocks or breaks the
agent: an internal error is logged to ``<storage>/logs/hooks.log`` and stderr), 1 (a non-blocking
error shown to the user) for unusable input such as a missing ``session_id`` (spec ERR-P1-03:
"session_id is required for memory capture") and for an event that is lost (the disk is full and
no daemon runs to keep it). Never 2, which would block.
"""

from __future__ import annotations

import json
import os
import re  # json imports it anyway
import sys
import time

from remindful import runtime
from remindful.config_defaults import STORAGE_PATH, read_bool, read_int
from remindful.config_sources import read_sources, storage_path
from remindful.engine.redact import DEFAULT_REDACTIONS, Redactor
from remindful.owned import private_dir, private_file, problem
from remindful.services.ingest.events import CONTEXT_EVENTS, HookInputError, build_record, normalize_event

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

USAGE = "usage: remindful [--path DIR] hook EVENT < hook.json   (EVENT: SessionStart, PreToolUse, ...)"
_LOG_REDACTOR = Redactor(list(DEFAULT_REDACTIONS), builtin=len(DEFAULT_REDACTIONS))  # compiles on first need


def hook_log(storage: str, level: str, message: str, *, echo: bool = True) -> None:
    """One line to ``<storage>/logs/hooks.log`` (0600) and, with ``echo``, to stderr, redacted by
    the built-in rules (an error may quote the input; the config may be what failed); never raises."""
    message = _LOG_REDACTOR.redact(message)
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} {message}\n"
    if echo:
        sys.stderr.write(f"remindful: {message}\n")
    if problem(storage) is not None:  # never into a directory another user controls
        return
    try:
        logs = os.path.join(storage, "logs")
        os.makedirs(logs, mode=0o700, exist_ok=True)
        fd = private_file(os.path.join(logs, "hooks.log"))
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


# -- the hook -----------------------------------------------------------------------------------


#: The specification's verbs (spec/hook-and-file-capture.md, "Hook Lifecycle Integration"), aliases
#: of ``hook EVENT``: verb → (the event, or None for the payload's ``hook_event_name``; the events
#: the verb accepts from the payload; the event when the payload names none).
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
RESPONSE_EVENTS = ("Stop", "SubagentStop", "SessionEnd")
ALIASES: dict[str, tuple[str | None, tuple[str, ...], str | None]] = {
    "session start": ("SessionStart", (), None),
    "session end": ("SessionEnd", (), None),
    "capture-memory --source hook": (None, TOOL_EVENTS, None),
    "capture-memory --source response": (None, RESPONSE_EVENTS, "Stop"),
    "inject-context": (None, CONTEXT_EVENTS, "UserPromptSubmit"),
}
VERBS = ("hook", "session", "capture-memory", "inject-context")


def parse_args(argv: list[str]) -> tuple[str | None, str | None, dict[str, Any]]:
    """``[--path P] [-v] VERB … [--path P] [--no-context]`` → (path, event, options), where VERB …
    is ``hook EVENT`` or one of :data:`ALIASES` (``capture-memory`` alone is ``--source hook``).
    For an alias that takes its event from the payload, ``options`` holds ``accepts`` and
    ``fallback``; an unusable command line sets ``options["usage"]`` to the message."""
    path: str | None = None
    words: list[str] = []
    options: dict[str, Any] = {"context": True}
    source: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--path", "-p", "--source") and i + 1 < len(args):
            if arg == "--source":
                source = args[i + 1]
            else:
                path = args[i + 1]
            i += 2
            continue
        if arg.startswith("--path="):
            path = arg.split("=", 1)[1]
        elif arg.startswith("--source="):
            source = arg.split("=", 1)[1]
        elif arg == "--no-context":
            options["context"] = False
        elif arg in ("-v", "--verbose"):
            options["verbose"] = True
        elif not arg.startswith("-"):
            words.append(arg)
        i += 1
    verb = words[0] if words else None
    if verb == "hook":
        return path, words[1] if len(words) > 1 else None, options
    if verb == "session":
        key = f"session {words[1] if len(words) > 1 else ''}".strip()
    elif verb == "capture-memory":
        key = f"capture-memory --source {source or 'hook'}"
    else:
        key = verb or ""
    if key not in ALIASES:
        options["usage"] = f"{key or 'hook'}: expected one of: hook EVENT, " + ", ".join(ALIASES)
        return path, None, options
    event, options["accepts"], options["fallback"] = ALIASES[key]
    return path, event, options


def _event_of(event_arg: str | None, payload: dict[str, Any], options: dict[str, Any]) -> str:
    """The event to handle: the command line's, else the payload's ``hook_event_name`` (within
    what an alias accepts), else the alias's fallback. Raises HookInputError."""
    if event_arg:
        return normalize_event(event_arg)
    named = payload.get("hook_event_name")
    accepts = options.get("accepts") or ()
    if not named and options.get("fallback"):
        return str(options["fallback"])
    event = normalize_event(str(named or ""))
    if accepts and event not in accepts:
        raise HookInputError(f"hook_event_name: expected one of {', '.join(accepts)} for this command, got {event!r}")
    return event


def run(argv: list[str], stdin: Any = None, stdout: Any = None, *, start_daemon: bool = False) -> int:
    """Handle one hook invocation; returns the process exit code (see the module docstring).
    ``start_daemon`` (the console script's): if the store has no daemon, start one
    (:func:`start_daemon_for`) unless ``hooks.start_daemon`` is off."""
    started = time.monotonic()
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    path, event_arg, options = parse_args(argv)
    from remindful.services.ingest.filters import CaptureFilter, FilterConfig

    storage: str | None = None
    try:
        memory = read_sources().merged()
        storage = storage_path(path, memory)
        flt = CaptureFilter(FilterConfig.from_mapping(memory))
        if flt.redactor is not None:
            flt.redactor.check()  # a user pattern that does not compile is a config error, now
        limit = read_int(memory, "limits.hook_payload_bytes", ge=1024)
        wants_daemon = start_daemon and read_bool(memory, "hooks.start_daemon")
    except Exception as exc:  # fail closed: never capture with defaults in place of a broken config
        storage = storage or _storage_for_the_log(path)
        hook_log(storage, "ERROR", f"config invalid, nothing captured: {exc}")
        return 0
    untrusted = problem(storage)
    if untrusted is not None:  # another user's, or writable by others: nothing goes in, not even a log line
        sys.stderr.write(f"remindful: storage directory {storage} {untrusted[0]}; nothing captured ({untrusted[1]})\n")
        return 0
    if "usage" in options:
        hook_log(storage, "ERROR", f"{options['usage']}. {USAGE}")
        return 1
    counts: dict[str, int] = {}
    oversized: list[int] = []
    try:
        payload = _read_payload(stdin, limit, oversized)
        event = _event_of(event_arg, payload, options)
        record, warnings = build_record(event, payload, time.time(), flt.redactor, counts)
    except PayloadTooLarge as exc:  # too large to even read: never spooled to fail at every drain
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
    if oversized:
        mark_truncated(record, oversized[0], limit)
        hook_log(
            storage,
            "WARNING",
            f"hook input of {oversized[0]:,} bytes is over limits.hook_payload_bytes ({limit:,}): its {event} "
            f"memory is kept cut to {min(OVERSIZED_KEEP_CHARS, limit // 8):,} characters (redacted whole first), "
            "marked truncated",
        )
    # The spool first, the context after: a hook killed at its timeout (as Claude Code kills it)
    # while it looks for context must have kept its event. The prompt itself never comes back as
    # its own context: a stored prompt is an intent, which context never injects, and its text is
    # excluded as well (``exclude`` of the request).
    from remindful.services.ingest.hooks import Prepared, Unwritable, commit, prepare_record

    prepared: Prepared | bool | None = False
    started_call = {"memories": list(record["memories"])}  # as built, whatever the filters keep of it
    code = 0
    try:
        prepared = prepare_record(flt, counts, event, payload, record)
        if isinstance(prepared, Prepared):
            commit(
                storage,
                prepared,
                warn=lambda message: hook_log(storage, "WARNING", message),
                keep_open=_OPEN if KEEP_OPEN else None,
            )
    except Unwritable as exc:
        code = keep_elsewhere(storage, event, exc)
    except Exception as exc:
        hook_log(storage, "ERROR", f"could not spool the {event} event: {type(exc).__name__}: {exc}")
    captured = prepared.spooled if isinstance(prepared, Prepared) else prepared
    if wants_daemon and captured is not None and event != "UserPromptSubmit":
        _start_daemon(storage)  # at once: warm by the first prompt, which has less time than SessionStart
    if event == "PreToolUse" and options["context"] and captured is not None and read_bool(memory, "hooks.inject"):
        try:
            _write_context(stdout, event, failure_warning_for(storage, memory, flt, started_call) or "")
        except Exception as exc:
            hook_log(storage, "ERROR", f"failure warning not given: {type(exc).__name__}: {exc}")
    if event in CONTEXT_EVENTS and options["context"] and captured is not None:
        deadline = CONTEXT_DEADLINE_S.get(event, 1.5)
        try:
            if not _print_context(started + deadline, storage, memory, event, payload, stdout, path):
                hook_log(
                    storage,
                    "WARNING",
                    f"no context for {event}: not ready within {deadline:g} s of the hook's start (a timeout would "
                    "lose it anyway); the daemon (started by the hooks, or `remindful daemon`) keeps the model "
                    "loaded and answers at once",
                )
        except Exception as exc:
            hook_log(storage, "ERROR", f"context injection failed: {type(exc).__name__}: {exc}")
    if wants_daemon and captured is not None and event == "UserPromptSubmit":
        _start_daemon(storage)  # after the context: a starting daemon would compete with it for the CPU
    return code


#: How long the daemon has to take an event the disk could not (its answer is a few milliseconds).
KEEP_TIMEOUT_S = 0.25


def keep_elsewhere(storage: str, event: str, failed: Any) -> int:
    """An event neither the catalog nor the fallback file could take (``failed``: the
    :class:`~remindful.services.ingest.hooks.Unwritable`, a full disk most likely): hand it to the
    running daemon, which keeps it in memory and spools it once the disk has room (``keep``
    request; lost if the daemon stops first). Says so on stderr and, where it can be written, in
    hooks.log. Returns the exit code: 0 when the daemon keeps it, else 1, so that Claude Code shows
    the user the line saying the event was lost (a non-blocking error: the agent goes on)."""
    why = str(failed)
    answer = runtime.ask_daemon(storage, {"op": "keep", **failed.record}, timeout=KEEP_TIMEOUT_S)
    if answer is not None and answer.get("success"):
        hook_log(
            storage,
            "WARNING",
            f"could not write the {event} event to {storage} ({why}): the daemon keeps it in memory and spools "
            "it once the disk has room (lost if the daemon stops first)",
        )
        return 0
    fix = "free space on that disk" if failed.full else "`remindful doctor` says what is wrong"
    hook_log(
        storage,
        "ERROR",
        f"the {event} event is lost: it could not be written to {storage} ({why}) and no daemon runs to keep it "
        f"until it can be; {fix}",
    )
    return 1


#: How long a PreToolUse hook on a shared catalog waits for its daemon's warning (the rest of the
#: hook's 0.5 s is its own work).
WARNING_DAEMON_S = 0.3
#: How long a PreToolUse hook waits for the catalog (held by a writer) before it gives no warning:
#: well inside the hook's 0.5 s timeout.
WARNING_BUSY_MS = 150


def failure_warning_for(storage: str, memory: dict[str, Any], flt: Any, record: dict[str, Any]) -> str | None:
    """The warning for the tool call a PreToolUse ``record`` starts, if the same call failed before
    in its project and has not succeeded since (:func:`remindful.services.ingest.forewarn.failure_warning`):
    a query of the catalog and the spool, no model. None for none. On a shared catalog the calls
    are stored on the server (every machine's of the team): the store's daemon, connected to it,
    answers (within :data:`WARNING_DAEMON_S`); without one, the machine's spool alone."""
    from remindful.services.ingest.forewarn import call_of

    if call_of(record) is None:
        return None  # no tool and key arguments: nothing to recognise the call by
    catalog = memory.get("catalog")
    if isinstance(catalog, dict) and catalog.get("url"):
        answer = runtime.ask_daemon(storage, {"op": "failure_warning", "record": record}, timeout=WARNING_DAEMON_S)
        if answer is not None and answer.get("success"):
            warning = answer.get("warning")
            return warning if isinstance(warning, str) and warning else None
    return _local_failure_warning(storage, memory, flt, record)


def _local_failure_warning(storage: str, memory: dict[str, Any], flt: Any, record: dict[str, Any]) -> str | None:
    """The warning from the machine's own catalog and spool (see :func:`failure_warning_for`)."""
    from remindful.engine import spool
    from remindful.engine.call_history import LocalHistory
    from remindful.engine.projects import Resolver
    from remindful.services.ingest.forewarn import failure_warning

    if not os.path.exists(os.path.join(storage, "catalog.sqlite3")):
        return None
    raw = memory.get("scopes")
    scopes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    fixed, names = scopes.get("project"), scopes.get("projects")
    clean = flt.redactor.redact if flt.redactor is not None else None
    resolve = Resolver(
        fixed if isinstance(fixed, str) else None, names if isinstance(names, dict) else None, clean=clean
    )
    hooks = memory.get("hooks")
    projects = hooks.get("projects") if isinstance(hooks, dict) else None
    if _OPEN:  # the spool's connection of this process, left open (KEEP_OPEN): no second one
        return failure_warning(LocalHistory(spool.reader(_OPEN[-1])), resolve, record, projects)
    conn = spool.connect(storage, busy_timeout_ms=WARNING_BUSY_MS)
    try:
        return failure_warning(LocalHistory(spool.reader(conn)), resolve, record, projects)
    finally:
        if KEEP_OPEN:
            _OPEN.append(conn)
        else:
            conn.close()


def _start_daemon(storage: str) -> None:
    try:
        start_daemon_for(storage)
    except Exception as exc:  # the spool keeps the events: the next hook tries again
        hook_log(storage, "ERROR", f"could not start the daemon: {type(exc).__name__}: {exc}")


#: The back-off between starts (a broken installation must not cost every hook a failed
#: process) is :func:`remindful.runtime.start_backoff_s`; the daemon's output is in
#: ``<storage>/logs/daemon.log``.
START_STAMP = runtime.START_STAMP
#: What the started process runs: the console script's entry, under this interpreter.
DAEMON_ENTRY = "from remindful.shells.entry import main; main()"


def start_daemon_for(storage: str) -> int | None:
    """Start the daemon of the store in ``storage`` as a detached process (its own session, stdin
    from /dev/null, output to ``logs/daemon.log``), unless one runs or starts, or one was started
    within its back-off (:func:`remindful.runtime.start_backoff_s`: seconds after the last start, up to
    half a minute while started daemons never come up). Returns its pid, or None if none was started.

    Safe under concurrent hooks: the hook takes the daemon lock itself (at most one does) and
    passes the descriptor to the new process, which holds the role from that moment on; the
    others find the lock taken. The process stops by itself after ``daemon.idle_exit_s``."""
    if runtime.start_backoff_s(storage) > 0:
        return None
    private_dir(storage, "storage directory")  # a first hook may come before the store exists
    lock = runtime.claim_daemon_lock(storage)
    if lock is None:
        return None
    try:
        runtime.note_start(storage)
        logs = os.path.join(storage, "logs")
        os.makedirs(logs, mode=0o700, exist_ok=True)
        out = private_file(os.path.join(logs, "daemon.log"))
        try:
            os.set_inheritable(lock, True)
            # -P: nothing of the working directory (the agent's project) on sys.path; with -c
            # alone, a json.py or secrets.py of the project would be imported (run) by the daemon.
            argv = [sys.executable, "-P", "-c", DAEMON_ENTRY, "--path", storage, "daemon", "--on-demand"]
            pid = os.posix_spawn(
                sys.executable,
                [*argv, "--lock-fd", str(lock)],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, out, 2),
                ],
                setsid=True,  # not in the agent's process group: its hook timeout does not kill it
            )
        finally:
            os.close(out)
    finally:
        os.close(lock)  # the new process holds the lock through its own descriptor
    hook_log(storage, "INFO", f"started the daemon of {storage} (pid {pid})", echo=False)
    return pid


def _storage_for_the_log(path: str | None) -> str:
    """Where to log a config that cannot be used: the storage directory as far as the sources that
    can still be read name it (the environment's without the file's), else ``--path`` as given (a
    log that cannot be written there goes to stderr only), else the default."""
    for layers in (lambda: read_sources(file=False).merged(), dict):
        try:
            return storage_path(path, layers())
        except Exception:
            continue
    return os.path.expanduser(path or STORAGE_PATH)


#: Seconds from a hook's start by which its context must be ready, well inside the timeout that
#: ``install-hooks`` writes (2 s for UserPromptSubmit, as the spec asks; 5 s for SessionStart):
#: an answer after the timeout is lost, and the agent waited for it. Without a daemon the hook loads
#: the model, and for a store of more than ``HOOK_EXACT_MAX`` memories (services/context.py) the
#: vector index too (a smaller one is scored exactly from the catalog), which a busy machine can
#: take longer than that to do: the hook then prints none (and logs why) rather than time out.
CONTEXT_DEADLINE_S = {"UserPromptSubmit": 1.5, "SessionStart": 4.0}


#: Without a daemon, a context hook scores a store of up to this many memories exactly from the
#: catalog rather than open the vector index: opening it (importing chromadb, loading the graph) took
#: longer than reading every stored vector at 100,000 memories (bench/hook_latency.py --context --store).
HOOK_EXACT_MAX = 100_000


def context_text(storage: str, memory: dict[str, Any], event: str, payload: dict[str, Any], path: str | None) -> str:
    """The context for a SessionStart/UserPromptSubmit hook ("" for none): the store's daemon's
    answer on the local channel (:func:`remindful.runtime.ask_daemon`), else, when the store holds
    any memory, :meth:`MemoryManager.hook_context` of the store itself. That one scores a store of
    up to :data:`HOOK_EXACT_MAX` memories (or ``search.exact_filter_max``, if larger) exactly from
    the catalog, and stores nothing: a backlog of spooled events is the daemon's to store, and
    would outlast the hook's timeout. Either searches the scopes seen from the agent's ``cwd``: its
    project's memories and the user's, never another project's."""
    from remindful.services.context import hook_request

    budget = read_int(memory, "hooks.context_budget_tokens", ge=50, le=100_000)
    request = hook_request(event, payload, budget)
    if not request["query"].strip():
        return ""
    timeout = CONTEXT_DEADLINE_S.get(event, 1.5)
    answer = runtime.ask_daemon(storage, {"op": "context", **request}, timeout=timeout)  # None at once if none
    if answer is not None and answer.get("success") and isinstance(answer.get("context"), str):
        return str(answer["context"])
    if not _stored_any(storage):
        return ""  # nothing to find: no model to load
    from remindful.api import MemoryManager
    from remindful.config import load_settings

    settings = load_settings(path or storage)
    bound = max(settings.search.exact_filter_max, HOOK_EXACT_MAX)
    with MemoryManager(settings, exact_before_index=bound) as manager:
        return manager.hook_context(request).text


def _stored_any(storage: str) -> bool:
    """Whether the store's catalog holds any memory (a connection of this thread's, left open as
    the spool's is: see :data:`KEEP_OPEN`)."""
    from remindful.engine import spool

    conn = spool.connect(storage)
    try:
        return spool.stored_any(spool.reader(conn))
    finally:
        if KEEP_OPEN:
            _OPEN.append(conn)
        else:
            conn.close()


def _print_context(
    deadline: float, storage: str, memory: dict[str, Any], event: str, payload: dict[str, Any], stdout: Any, path: Any
) -> bool:
    """Print the context if it is ready by ``deadline`` (``time.monotonic()``); False if it was not
    (the work goes on in a daemon thread that the process's exit ends)."""
    import threading

    outcome: list[BaseException | None] = []
    given_up = False
    lock = threading.Lock()

    def work() -> None:
        try:
            text = context_text(storage, memory, event, payload, path)
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

#: A hook input over ``limits.hook_payload_bytes`` but within this many times it is still read
#: whole (a failing build's long log), redacted whole, and kept cut to :data:`OVERSIZED_KEEP_CHARS`
#: per memory (:func:`mark_truncated`); a larger one is read to its end and dropped (logged).
OVERSIZED_READ_FACTOR = 4
OVERSIZED_KEEP_CHARS = 16_000


class PayloadTooLarge(Exception):
    """The hook's stdin is larger than ``limits.hook_payload_bytes`` times :data:`OVERSIZED_READ_FACTOR`."""


def mark_truncated(record: dict[str, Any], size: int, limit: int) -> None:
    """Mark each memory of ``record`` as made from a hook input of ``size`` bytes, over ``limit``:
    :func:`remindful.services.ingest.hooks.prepare_record` cuts its text to ``keep_chars`` after
    the capture filters redacted it whole, and says so in the text."""
    keep = min(OVERSIZED_KEEP_CHARS, limit // 8)  # well under the limit the drain applies, in UTF-8 too
    for item in record["memories"]:
        item["metadata"]["truncated"] = {"bytes": size, "limit": limit, "keep_chars": keep}


def _read_payload(stdin: Any, limit: int, oversized: list[int] | None = None) -> dict[str, Any]:
    """The JSON object on ``stdin``. One of up to ``limit`` bytes is read as it is; a larger one
    (up to :data:`OVERSIZED_READ_FACTOR` times ``limit``) too, its size appended to ``oversized``; a
    still larger one raises PayloadTooLarge once the rest is read and dropped (the agent writing it
    never sees a broken pipe)."""
    if hasattr(stdin, "isatty") and stdin.isatty():
        raise HookInputError("hook input: expected the agent's hook JSON on stdin. " + USAGE)
    raw = getattr(stdin, "buffer", None)
    most = limit * (OVERSIZED_READ_FACTOR if oversized is not None else 1)
    data: str | bytes = raw.read(most + 1) if raw is not None else stdin.read(most + 1)
    if len(data) > most:
        size = len(data)
        while chunk := (raw.read(1 << 20) if raw is not None else stdin.read(1 << 20)):
            size += len(chunk)
        raise PayloadTooLarge(
            f"hook input of {size:,} bytes is over {most:,} bytes (limits.hook_payload_bytes, {limit:,}, "
            f"x {OVERSIZED_READ_FACTOR if oversized is not None else 1}); raise the limit in the config to capture "
            "such events"
        )
    if len(data) > limit and oversized is not None:
        oversized.append(len(data.encode("utf-8", "replace")) if isinstance(data, str) else len(data))
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


#: The console script leaves its connection open and ends with ``os._exit``: closing the last
#: connection to a WAL database checkpoints it (an fsync that would double a hook's time). The
#: committed transaction is in the WAL file; the next connection sees it.
KEEP_OPEN = False
_OPEN: list[Any] = []  # the engine's connections (engine.connection)


def _write_context(stdout: Any, event: str, text: str) -> None:
    if text:
        out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
        stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        stdout.flush()


def main(argv: list[str] | None = None) -> None:
    """The process entry: run (starting the store's daemon if none runs), flush, and exit without
    closing the catalog (see KEEP_OPEN)."""
    global KEEP_OPEN
    KEEP_OPEN = True
    # A process of a second or less: what a context hook imports without a daemon (pydantic, numpy,
    # onnxruntime) allocates objects that live until the exit, and the collections they set off
    # free nothing (some 10 % of that hook's CPU).
    import gc

    gc.disable()
    code = run(sys.argv[1:] if argv is None else argv, start_daemon=True)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


__all__ = ["ALIASES", "VERBS", "context_text", "main", "parse_args", "run", "start_daemon_for"]
