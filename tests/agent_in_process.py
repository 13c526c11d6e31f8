"""A Claude Code session, simulated in this process (``agent_session.py`` runs the installed hook
commands as processes instead) with the hook payloads Claude Code documents: every event runs
the real hook entry (:func:`remindful.shells.hook.run`, in-process, capture only), and the
transcript file grows as Claude Code writes it, so that a Stop without ``last_assistant_message``
reads its answer from there.

The context a hook would inject is asked of the manager the test holds, with the request the hook
builds from the payload (:func:`remindful.services.context.hook_request`): what the store's daemon
answers, without the transport (the hook process and its socket are tested elsewhere).
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

from remindful.api import MemoryManager
from remindful.shells.hook import run


class AgentSession:
    """One session of a coding agent in ``project`` (a directory), spooling into ``store``."""

    def __init__(self, store: Path, project: Path, session_id: str | None = None) -> None:
        self.store = store
        self.project = project
        self.session_id = session_id or f"sess-{uuid.uuid4().hex[:12]}"
        self.transcript = project / ".transcripts" / f"{self.session_id}.jsonl"
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.transcript.touch()
        self.codes: list[int] = []
        self._calls = 0

    # -- the events ------------------------------------------------------------------------------

    def fire(self, event: str, **fields: Any) -> dict[str, Any]:
        payload = {
            "session_id": self.session_id,
            "transcript_path": str(self.transcript),
            "cwd": str(self.project),
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }
        argv = ["--path", str(self.store), "hook", event, "--no-context"]
        self.codes.append(run(argv, stdin=io.StringIO(json.dumps(payload)), stdout=io.StringIO()))
        return payload

    def start(self, source: str = "startup") -> dict[str, Any]:
        return self.fire("SessionStart", source=source, model="claude-sonnet-4-5")

    def prompt(self, text: str) -> dict[str, Any]:
        self._write({"type": "user", "message": {"role": "user", "content": text}})
        return self.fire("UserPromptSubmit", prompt=text)

    def tool(
        self,
        name: str,
        tool_input: dict[str, Any],
        response: Any = None,
        *,
        error: str | None = None,
        post: bool = True,
    ) -> str:
        """One tool call: PreToolUse, then PostToolUse with ``response`` or PostToolUseFailure
        with ``error`` (neither with ``post=False``: the call never finished). Returns its id."""
        self._calls += 1
        tool_use_id = f"toolu_{self.session_id[-6:]}_{self._calls:03d}"
        common = {"tool_name": name, "tool_input": tool_input, "tool_use_id": tool_use_id}
        self._write(
            {
                "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "tool_use", "id": tool_use_id, "name": name}]},
            }
        )
        self.fire("PreToolUse", **common)
        if not post:
            return tool_use_id
        if error is not None:
            self.fire("PostToolUseFailure", **common, error=error, is_interrupt=False)
        else:
            self.fire("PostToolUse", **common, tool_response=response)
        result = error if error is not None else json.dumps(response)
        self._write(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": result}],
                },
            }
        )
        return tool_use_id

    def read(self, path: str, content: str) -> str:
        lines = content.count("\n") + 1
        response = {
            "type": "text",
            "file": {"filePath": path, "content": content, "numLines": lines, "startLine": 1, "totalLines": lines},
        }
        return self.tool("Read", {"file_path": path}, response)

    def edit(self, path: str, old: str, new: str, original: str = "") -> str:
        response = {
            "filePath": path,
            "oldString": old,
            "newString": new,
            "originalFile": original,
            "structuredPatch": [
                {"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1, "lines": [f"-{old}", f"+{new}"]}
            ],
            "userModified": False,
            "replaceAll": False,
        }
        return self.tool("Edit", {"file_path": path, "old_string": old, "new_string": new}, response)

    def bash(self, command: str, stdout: str = "", *, description: str = "", error: str | None = None) -> str:
        tool_input = {"command": command, **({"description": description} if description else {})}
        response = {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False}
        return self.tool("Bash", tool_input, response, error=error)

    def answer(self, text: str, *, in_payload: bool = False) -> dict[str, Any]:
        """The assistant's final answer of the turn, written to the transcript; the Stop payload
        carries it only with ``in_payload`` (older Claude Code versions never do)."""
        self._write(
            {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}
        )
        extra = {"last_assistant_message": text} if in_payload else {}
        return self.fire("Stop", stop_hook_active=False, **extra)

    def end(self, reason: str = "prompt_input_exit") -> dict[str, Any]:
        return self.fire("SessionEnd", reason=reason)

    # -- what the hook would inject -----------------------------------------------------------------

    def context(self, manager: MemoryManager, payload: dict[str, Any]) -> str:
        """The text the hook would inject for ``payload`` (a SessionStart or UserPromptSubmit
        payload this session fired), as the store's daemon answers it."""
        from remindful.services.context import hook_request

        request = hook_request(payload["hook_event_name"], payload, None)
        return manager.hook_context(request).text

    def _write(self, entry: dict[str, Any]) -> None:
        entry = {"uuid": uuid.uuid4().hex, "sessionId": self.session_id, **entry}
        with self.transcript.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
