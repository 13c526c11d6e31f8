"""A fused BERT graph for all-MiniLM-L6-v2, rebuilt from the weights of an ONNX export of it.

torch's exporters spell each attention layer as some forty small operators (the dynamo exporter's
spelling, with ``IsNaN``/``Where`` guards, is one ONNX Runtime's fusion passes do not recognise), and
on a CPU running a short text, dispatching those operators costs as much as the arithmetic. This
module reads the weights out of a constant-folded export and writes the graph ONNX Runtime runs
fastest: the embeddings (the vocabulary kept int8), then per layer ``Attention``, ``MatMul`` +
residual ``LayerNormalization``, ``MatMul`` + ``BiasGelu``, ``MatMul`` + residual
``LayerNormalization`` (``Attention`` and ``BiasGelu`` are the CPU provider's ``com.microsoft``
operators). Dynamic int8 quantization then turns ``Attention`` into ``QAttention`` and each
``MatMul`` into an integer one (:mod:`remindful.embed.quantize`).

The rebuilt graph is checked against the export it came from before it is used
(:func:`verify_same_output`); an export this module does not understand raises
:class:`UnsupportedExport`, and the caller keeps the export's own graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# all-MiniLM-L6-v2's config: 12 heads of 32 dimensions, BERT's LayerNorm epsilon.
NUM_HEADS = 12
LAYER_NORM_EPSILON = 1e-12
# Per layer, the Linear modules: each weight MatMul is named by the bias added to its output.
_LINEARS = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
}
_TOLERANCE = 1e-3
#: Graph optimizations that sessions running the rebuilt graph must turn off (see :func:`residual_norm`).
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


class UnsupportedExport(Exception):
    """The export's weights could not be read, or the rebuilt graph does not compute what it does."""


def build_fused(folded: Any, *, num_heads: int = NUM_HEADS) -> Any:
    """The fused ``onnx.ModelProto`` for ``folded``, an export whose weights are plain initializers.

    Biases and LayerNorm parameters are found by their Hugging Face names, whatever prefix the
    exporter added, and each weight MatMul by the bias added to its output (:func:`linear_weights`).
    Inputs are ``input_ids`` and ``attention_mask`` (right-padded), the output
    ``last_hidden_state``, as in the export.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}
    linear = linear_weights(folded, weights)
    layers = sum(1 for name in weights if name.endswith("attention.self.query.bias"))
    if layers == 0:
        raise UnsupportedExport("no encoder layers found (no initializer named *attention.self.query.bias)")

    def named(suffix: str) -> np.ndarray:
        return only_one(weights, suffix, f"initializer named *{suffix}")

    words = named("embeddings.word_embeddings.weight")
    # The vocabulary table is most of the model's size: it stays int8 (one scale per row) and only
    # the rows of a text's tokens are converted, as the export does.
    scales = np.maximum(np.abs(words).max(axis=1, keepdims=True), 1e-12) / 127.0
    tensors: dict[str, np.ndarray] = {
        "word_embeddings_int8": np.round(words / scales).astype(np.int8),
        "word_embeddings_scale": scales.astype(np.float32),
        # The model always runs with token type 0: its embedding is folded into every position's.
        "position_embeddings": named("embeddings.position_embeddings.weight")
        + named("embeddings.token_type_embeddings.weight")[0],
        "embeddings_gamma": named("embeddings.LayerNorm.weight"),
        "embeddings_beta": named("embeddings.LayerNorm.bias"),
        "zero": np.array([0], dtype=np.int64),
        "one": np.array([1], dtype=np.int64),
    }
    node = helper.make_node
    nodes = [
        node("Gather", ["word_embeddings_int8", "input_ids"], ["token_int8"]),
        node("Gather", ["word_embeddings_scale", "input_ids"], ["token_scale"]),
        node("Cast", ["token_int8"], ["token_float"], to=TensorProto.FLOAT),
        node("Mul", ["token_float", "token_scale"], ["token_embeddings"]),
        node("Shape", ["input_ids"], ["length"], start=1, end=2),
        node("Slice", ["position_embeddings", "zero", "length", "zero"], ["positions"]),
        node("Add", ["token_embeddings", "positions"], ["embeddings"]),
        node(
            "LayerNormalization",
            ["embeddings", "embeddings_gamma", "embeddings_beta"],
            ["hidden0"],
            axis=-1,
            epsilon=LAYER_NORM_EPSILON,
        ),
        # Attention takes each row's length (right padding): the sum of its mask.
        node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
        node("ReduceSum", ["mask32", "one"], ["mask_index"], keepdims=0),
    ]
    hidden = "hidden0"
    for layer in range(layers):
        prefix = f"encoder.layer.{layer}."
        mats = {key: linear(prefix + module) for key, module in _LINEARS.items()}
        t = {
            "qkv": np.concatenate([mats["query"], mats["key"], mats["value"]], axis=1),
            "qkv_bias": np.concatenate(
                [named(prefix + f"attention.self.{part}.bias") for part in ("query", "key", "value")]
            ),
            "attention_output": mats["attention_output"],
            "attention_output_bias": named(prefix + "attention.output.dense.bias"),
            "attention_gamma": named(prefix + "attention.output.LayerNorm.weight"),
            "attention_beta": named(prefix + "attention.output.LayerNorm.bias"),
            "intermediate": mats["intermediate"],
            "intermediate_bias": named(prefix + "intermediate.dense.bias"),
            "output": mats["output"],
            "output_bias": named(prefix + "output.dense.bias"),
            "output_gamma": named(prefix + "output.LayerNorm.weight"),
            "output_beta": named(prefix + "output.LayerNorm.bias"),
        }
        n = {key: f"l{layer}.{key}" for key in t}
        tensors.update({n[key]: value for key, value in t.items()})
        v = {key: f"l{layer}.{key}" for key in ("attention", "projected", "mid", "up", "gelu", "down")}
        out = f"hidden{layer + 1}"
        nodes += [
            helper.make_node(
                "Attention",
                [hidden, n["qkv"], n["qkv_bias"], "mask_index"],
                [v["attention"]],
                domain="com.microsoft",
                num_heads=num_heads,
            ),
            helper.make_node("MatMul", [v["attention"], n["attention_output"]], [v["projected"]]),
            *residual_norm(
                v["projected"], n["attention_output_bias"], hidden, n["attention_gamma"], n["attention_beta"], v["mid"]
            ),
            helper.make_node("MatMul", [v["mid"], n["intermediate"]], [v["up"]]),
            helper.make_node("BiasGelu", [v["up"], n["intermediate_bias"]], [v["gelu"]], domain="com.microsoft"),
            helper.make_node("MatMul", [v["gelu"], n["output"]], [v["down"]]),
            *residual_norm(v["down"], n["output_bias"], v["mid"], n["output_gamma"], n["output_beta"], out),
        ]
        hidden = out
    nodes.append(helper.make_node("Identity", [hidden], ["last_hidden_state"]))
    dim = int(words.shape[1])
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2-fused",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", dim])],
        [numpy_helper.from_array(np.ascontiguousarray(value), name) for name, value in tensors.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8  # readable by every onnxruntime this package supports
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise UnsupportedExport(f"the rebuilt graph is not valid ONNX: {exc}") from exc
    return model


def residual_norm(x: str, bias: str, residual: str, gamma: str, beta: str, out: str) -> list[Any]:
    """``LayerNorm(x + bias + residual)`` as plain operators. Not ``SkipLayerNormalization``: its CPU
    kernel took 12% of a batch's time, twice what these three take (sessions must then disable
    ONNX Runtime's ``SkipLayerNormFusion``, which would fuse them back: :data:`DISABLED_OPTIMIZERS`)."""
    from onnx import helper

    return [
        helper.make_node("Add", [x, bias], [out + ".biased"]),
        helper.make_node("Add", [out + ".biased", residual], [out + ".sum"]),
        helper.make_node("LayerNormalization", [out + ".sum", gamma, beta], [out], axis=-1, epsilon=LAYER_NORM_EPSILON),
    ]


def linear_weights(folded: Any, weights: dict[str, np.ndarray]) -> Any:
    """A lookup from a Linear module's name (``encoder.layer.0.attention.self.query``) to its weight.

    Graph order cannot tell query, key and value apart (ONNX Runtime reorders nodes when it saves),
    but each weight MatMul's output goes into an ``Add`` with the module's named bias.
    """
    consumers: dict[str, list[Any]] = {}
    for node in folded.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    by_bias: dict[str, np.ndarray] = {}
    for node in folded.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights:
            continue
        for add in consumers.get(node.output[0], []):
            if add.op_type == "Add":
                by_bias.update({name: weights[node.input[1]] for name in add.input if name.endswith(".bias")})

    def lookup(module: str) -> np.ndarray:
        return only_one(by_bias, module + ".bias", f"weight MatMul followed by the bias of {module}")

    return lookup


def only_one(tensors: dict[str, np.ndarray], suffix: str, what: str) -> np.ndarray:
    """The one tensor whose name ends with ``suffix``, as float32; :class:`UnsupportedExport`
    (saying ``expected one {what}``) if there is none or several."""
    found = [value for name, value in tensors.items() if name.endswith(suffix)]
    if len(found) != 1:
        raise UnsupportedExport(f"expected one {what}, found {len(found)}")
    return np.asarray(found[0], dtype=np.float32)


def verify_same_output(fused: Path, reference: Path) -> float:
    """The largest difference between the two models' token states on a sample batch.

    The batch mixes lengths (so padding and the attention mask are exercised) and token ids across
    the vocabulary. Raises :class:`UnsupportedExport` above a tolerance far below what int8 changes.
    """
    import onnxruntime as ort

    rng = np.random.default_rng(7)
    lengths = [3, 17, 40, 9]
    input_ids = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = [101, *rng.integers(1000, 30000, length - 2), 102]
        mask[row, :length] = 1
    states = []
    for path in (fused, reference):
        session = ort.InferenceSession(
            str(path), providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS
        )
        feeds: dict[str, np.ndarray] = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        states.append(session.run(None, feeds)[0])
    kept = mask.astype(bool)
    difference = float(np.abs(states[0][kept] - states[1][kept]).max())
    if not difference <= _TOLERANCE:  # also catches NaN
        raise UnsupportedExport(f"the rebuilt graph differs from the export by {difference:.3g}")
    return difference
