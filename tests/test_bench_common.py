"""bench/common.py, and that every bench starts: its help, and a tiny run of those that use the fake embedder."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "common.py")


def load_common() -> ModuleType:
    """bench/common.py under a name of its own (the benches import it as ``common``, as scripts)."""
    spec = importlib.util.spec_from_file_location("remindful_bench_common", BENCH / "common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = load_common()


def test_percentile_is_nearest_rank() -> None:
    assert common.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 3.0  # the upper middle of an even count
    assert common.percentile([float(i) for i in range(1, 101)], 0.95) == 96.0
    assert common.percentile([2.0, 1.0], 1.0) == 2.0
    assert common.pct([1.23456], 0.5, 2) == 1.23


def test_the_data_default_is_beside_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(common.DATA_ENV, raising=False)
    assert common.default_data() == ROOT.parent / "shared" / "data" / "locomo_dev.json"


def test_the_environment_overrides_the_data_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(common.DATA_ENV, str(tmp_path / "other.json"))
    parser = common.parser("doc")
    common.add_data_option(parser)
    assert parser.parse_args([]).data == tmp_path / "other.json"
    assert parser.parse_args(["--data", "x.json"]).data == Path("x.json")


def test_the_paraphrase_data_has_its_own_default_and_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(common.PERSONACHAT_ENV, raising=False)
    assert common.default_data("personachat") == ROOT.parent / "shared" / "data" / "personachat_dev.json"
    monkeypatch.setenv(common.PERSONACHAT_ENV, str(tmp_path / "p.json"))
    parser = common.parser("doc")
    common.add_data_option(parser, kind="personachat")
    assert parser.parse_args([]).data == tmp_path / "p.json"


def test_the_baselines_rank_by_cosine_and_by_bm25() -> None:
    from remindful.embed import FakeEmbedder

    texts = ["the deploy script needs a profile", "dark mode in every editor", "lunch with anna on friday"]
    assert common.bm25_rankings(texts, ["editor theme", "nothing shared", "deploy the script"], 2) == [[1], [], [0]]
    ranked = common.cosine_rankings(FakeEmbedder(), texts, ["dark mode editor"], 3)
    assert ranked[0][0] == 1 and sorted(ranked[0]) == [0, 1, 2]


def test_a_missing_data_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--data PATH or set REMINDFUL_BENCH_DATA"):
        common.load_locomo(tmp_path / "missing.json")


def test_turns_come_in_session_order() -> None:
    turn = {"speaker": "A", "dia_id": "D", "text": ""}
    conversation = {
        "session_2": [{**turn, "text": "second"}],
        "session_2_date_time": "2 pm",
        "session_1": [{**turn, "text": "first"}],
        "session_1_date_time": "1 pm",
        "session_10": [{**turn, "text": "never reached: no session_3"}],
    }
    assert [date for date, _ in common.sessions(conversation)] == ["1 pm", "2 pm"]
    assert common.turn_texts([{"conversation": conversation}], speaker=True) == ["A: first", "A: second"]


def test_versus_prints_both_figures_and_their_ratio() -> None:
    assert common.versus("a", 12.0, "b", 4.0) == "a 12.0 ms vs b 4.00 ms = 3.00x"
    assert common.versus("a", 0.0123, "b", 0.0, unit="s") == "a 0.0123 s vs b 0 s = n/a"


def test_scratch_dir_is_removed(tmp_path: Path) -> None:
    with common.scratch_dir() as root:
        (root / "file").write_text("x")
    assert not root.exists()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_bench_finds_the_data_itself(script: Path) -> None:
    """The data path is decided once, in common.py: no bench defines ``--data`` or walks up from its file."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    options = {
        arg.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        for arg in node.args
        if isinstance(arg, ast.Constant)
    }
    assert "--data" not in options
    assert "parents" not in {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_bench_is_in_the_readme(script: Path) -> None:
    assert f"`{script.name}`" in (BENCH / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_bench_has_help(script: Path) -> None:
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--json" in done.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["capture_submit.py", "--calls", "5"],
        ["store_after_idle.py", "--attachments", "20", "--stores", "3"],
        ["retention.py", "--n", "300", "--index", "memory"],
    ],
    ids=lambda c: c[0],
)
def test_a_tiny_run_prints_its_figures(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / command[0]), *command[1:], "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["machine"]) == {"cpus", "load_average_1m"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["locomo.py", "--conversations", "1", "--no-baseline"],
        ["personachat.py", "--view", "per-user"],
        ["longmemeval.py", "--questions", "1", "--granularity", "turn"],
    ],
    ids=lambda c: c[0],
)
def test_a_quality_bench_runs_on_the_real_model_without_a_vector_cache(command: list[str]) -> None:
    """The quality benches compare against plain cosine with the store's own embedder: without
    ``--embedding-cache`` they asked the store for it through ``ready()``, which returns nothing."""
    done = subprocess.run(
        [sys.executable, str(BENCH / command[0]), *command[1:], "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "machine" in json.loads(done.stdout)


def test_plain_cosine_is_set_to_abstain_as_often_as_the_context() -> None:
    relevant = [(1, 0.9), (2, 0.5), (6, 0.95), (None, 0.0), (1, 0.3)]
    abstention = [0.2, 0.4, 0.6, 0.8]  # each abstention query's best cosine
    # Abstaining on half of them puts the threshold just above 0.4: kept are the first-five hits above it.
    assert common.cosine_at_abstention(relevant, abstention, 0.5) == 2 / 5
    assert common.cosine_at_abstention(relevant, abstention, 0.0) == 3 / 5  # no threshold: the first five
    assert common.cosine_at_abstention(relevant, abstention, 1.0) == 1 / 5  # above every abstention query
    assert common.cosine_at_abstention([], abstention, 0.5) == 0.0
