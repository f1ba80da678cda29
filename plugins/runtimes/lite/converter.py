"""MindSpore Lite's converter in a stack's worker: turn a MindIR into what the deployment really
serves, with exactly the options it declares (``[stacks.X.convert]``, ``[models.N.convert]``).

Lite 2.0's Python package has the converter (``mindspore_lite.Converter``: no-argument
constructor, options as properties, ``convert(fmk_type, model_file, output_file,
weight_file="", config_file="")``); its wheel has no ``converter_lite`` program. What was
measured on it (research notes, converter_onnx/README.md section A) and shapes this module:

- ``save_type`` MINDIR_LITE writes ``<output>.ms`` (a FlatBuffer, identifier ``MSL2`` at byte
  4, no version string in it), MINDIR writes ``<output>.mindir`` (a MindIR whose
  ``model_version`` is the converter's own version). A ``.ms`` loads only as
  ``ModelType.MINDIR_LITE``, a MindIR only as ``ModelType.MINDIR``: ``model_type`` picks by
  the file's bytes.
- ``save_type`` MINDIR fails on graphs with an output that does not depend on the inputs
  (``param proto name ... is not in param dict``); ``weight_fp16`` changes nothing in a MINDIR
  output and stores float32 constants as float16 in a ``.ms``, where a constant-folded output
  comes out as garbage (two fp16 values read as one float32). Neither is hidden here: the
  auditor compares what the conversion serves.
- a failure is a Python exception whose text is only a status ("Common error code."); the
  reason is in the native log on stderr, which the worker returns with every reply.
- on success the native library prints ``CONVERT RESULT SUCCESS:0`` on file descriptor 1: the
  worker's protocol stream is a duplicate of the original fd 1 taken at start, and fd 1 itself
  points at stderr (auditor/worker/main.py), so the line lands in the log, never in a frame.
- unknown config-file sections and ``input_shape`` names that match no input are accepted
  without a word; ``infer=True`` (pre-inference after conversion) can hang, so it is never set,
  and a conversion runs under the worker's request deadline.

Python 3.7, standard library only (``mslite`` is the stack's imported ``mindspore_lite``).
"""

import hashlib
import os

SAVE_TYPES = {"ms": ("MINDIR_LITE", ".ms"), "mindir": ("MINDIR", ".mindir")}
DATA_TYPES = {"float32": "FLOAT32", "int8": "INT8", "uint8": "UINT8"}
OPTIMIZE = ("none", "general", "ascend_oriented")
FLATBUFFER_IDS = (b"MSL1", b"MSL2")


def is_flatbuffer(head):
    """Whether a file starting with ``head`` is a Lite ``.ms`` (FlatBuffer identifier at byte 4)."""
    return head[4:8] in FLATBUFFER_IDS


def model_type(mslite, path):
    """The ModelType a file loads as: MINDIR_LITE for a ``.ms``, MINDIR otherwise."""
    with open(path, "rb") as f:
        head = f.read(8)
    return mslite.ModelType.MINDIR_LITE if is_flatbuffer(head) else mslite.ModelType.MINDIR


def converter_identity(mslite):
    """The converter's version: the package version and the build's commit (``.commit_id``
    next to the package; Lite has no converter-specific version)."""
    commit = None
    path = os.path.join(os.path.dirname(mslite.__file__), ".commit_id")
    try:
        with open(path) as f:
            words = f.read().split()
        commit = words[-1] if words else None
    except OSError:
        pass
    return {"package": "mindspore-lite", "version": getattr(mslite, "__version__", None), "commit": commit}


def convert(mslite, source, output_base, options, config_path=None):
    """Convert the MindIR at ``source`` with ``options`` (optimize, weight_fp16, input_shape,
    input_data_type, output_data_type, save_type); returns the converted bytes with what
    describes them. Raises whatever the converter raises (ValueError/TypeError from its
    property setters, RuntimeError from ``convert``)."""
    save = options.get("save_type", "ms")
    type_name, suffix = SAVE_TYPES[save]
    conv = mslite.Converter()
    conv.save_type = getattr(mslite.ModelType, type_name)
    conv.optimize = options.get("optimize", "general")  # ascend_oriented also sets device Ascend
    conv.weight_fp16 = bool(options.get("weight_fp16", False))
    shapes = options.get("input_shape") or {}
    if shapes:
        conv.input_shape = dict((str(k), [int(d) for d in v]) for k, v in shapes.items())
    conv.input_data_type = getattr(mslite.DataType, DATA_TYPES[options.get("input_data_type", "float32")])
    conv.output_data_type = getattr(mslite.DataType, DATA_TYPES[options.get("output_data_type", "float32")])
    written = output_base + suffix
    if os.path.exists(written):
        os.chmod(written, 0o600)  # the converter writes 0400 files; a second conversion replaces it
        os.remove(written)
    conv.convert(mslite.FmkType.MINDIR, source, output_base, config_file=config_path or "")
    with open(written, "rb") as f:
        data = f.read()
    return {
        "data": data,
        "format": "ms" if is_flatbuffer(data[:8]) else "mindir",
        "converter": converter_identity(mslite),
        "path": written,
        "precision_settings": precision_settings(conv),
    }


PRECISION_WORDS = ("fp16", "bf16", "data_type", "precision", "quant", "mixed")


def precision_settings(conv):
    """The converter's own settings that touch numeric precision, as its Python object has them
    (Lite 2.0: weight_fp16, input_data_type, output_data_type; no per-layer precision):
    `auditor fix` says what it could search."""
    return sorted(a for a in dir(conv) if not a.startswith("_") and any(w in a for w in PRECISION_WORDS))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
