"""The public surface: __all__ matches what the package exports, and every name resolves."""

from __future__ import annotations

import subprocess
import sys

import remindful


def test_all_names_resolve_and_are_public() -> None:
    for name in remindful.__all__:
        assert getattr(remindful, name) is not None, name
    public = {n for n in dir(remindful) if not n.startswith("_")} - {
        "annotations",
        "importlib",
        "os",
        "TYPE_CHECKING",
        "Any",
    }
    assert public <= set(remindful.__all__) | {"open", "aio", "config", "errors", "manager", "model"} | set(
        n
        for n in public
        if n
        in {"catalog", "embed", "filters", "index", "search", "shells", "stats", "storage"}
        | {"attachments", "backup", "export", "policy", "sessions"}  # lifecycle submodules, once imported
        | {"learning"}  # conversation capture, corrections, workflows, suggestions, once imported
    )


def test_errors_share_one_base() -> None:
    for name in remindful.__all__:
        value = getattr(remindful, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, remindful.RemindfulError), name


def test_import_and_open_stay_light(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "import remindful\n"
        f"m = remindful.open({str(tmp_path)!r})\n"
        "heavy = [n for n in ('chromadb', 'onnxruntime', 'torch', 'tokenizers') if n in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
