"""The public surface: __all__ matches what the package exports, and every name resolves."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import remindful


def test_all_names_resolve_and_are_public() -> None:
    for name in remindful.__all__:
        assert getattr(remindful, name) is not None, name
    # Everything else the package namespace holds is a submodule or an implementation detail.
    helpers = {"annotations", "importlib", "os", "TYPE_CHECKING", "Any"}
    extra = {
        name
        for name in dir(remindful)
        if not name.startswith("_") and name not in helpers and not isinstance(getattr(remindful, name), ModuleType)
    }
    assert extra <= set(remindful.__all__), extra - set(remindful.__all__)
    assert sorted(remindful.__all__) == sorted(set(remindful.__all__))


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
