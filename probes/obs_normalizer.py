"""Observation normalizer: (obs - mean) / sqrt(var + eps), clipped to ±clip, with the running
statistics baked into the exported cell, as PPO implementations ship it in front of the policy.

The inputs are built to hit the cases where runtimes part ways, one block of rows per class:
ordinary observations, huge magnitudes (near the dtype's maximum, where the subtraction and
division overflow), denormals, NaN, +Inf and -Inf. Two feature columns have near-zero and zero
variance (the denominator is then sqrt(eps) or, when eps underflows, 0). Each element is
classed by its row, or for ordinary rows by its column, and the ``normalizer_classes``
comparator reports every class separately: differences, NaN masking (NaN in, finite out),
sign flips and clip disagreements.
"""

import numpy as np

NAME = "obs_normalizer"
VERSION = "1"
INPUTS = ("obs",)
OUTPUTS = ("normalized",)
DEFAULT_PARAMS = {
    "obs_dim": 6,
    "batch": 96,
    "seed": 0,
    "dtype": "float32",
    "clip": 10.0,
    "eps": 1e-8,
}
VARIANTS = {
    "fp32": {"dtype": "float32"},
    "fp16": {"dtype": "float16"},
}
PARAMS = {
    "obs_dim": {"type": "integer", "minimum": 1, "maximum": 4096},
    "batch": {"type": "integer", "minimum": 1, "maximum": 65536},
    "seed": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    "dtype": {"type": "string", "enum": ["float32", "float16"]},
    "clip": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
    "eps": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
}
"""The parameters' types and ranges: auditor.toml's [probes.obs_normalizer.params] is checked
against them."""
COMPARATORS = ("normalizer_classes", "finite_where_train_finite")
ROW_CLASSES = ("ordinary", "huge", "denormal", "nan", "+inf", "-inf")
NEAR_ZERO_VAR = 1e-12


# Checked on each stack's outputs alone (auditor.policy.invariants): the clip bounds every finite
# observation's output; a NaN/Inf observation that comes out finite is a hazard.
NAN_PROPAGATES = ("normalized",)


def invariants(params):
    clip = float(params["clip"])
    return [{"output": "normalized", "check": "within", "low": -clip, "high": clip}]


def reference(params, weights, inputs):
    """The cell's arithmetic in float64 numpy, with its constants as the cell holds them (in
    fp16, eps = 1e-8 is 0): NaN stays NaN through the clip, ±Inf is clipped to ±clip."""
    dtype = np.dtype(params["dtype"])
    clip = float(np.asarray(params["clip"], dtype=dtype))
    eps = float(np.asarray(params["eps"], dtype=dtype))
    obs = np.asarray(inputs[0], dtype=np.float64)
    mean, var = (weights[k].astype(np.float64) for k in ("mean", "var"))
    z = (obs - mean) / np.sqrt(var + eps)
    return {"normalized": np.minimum(np.maximum(z, -clip), clip)}


def row_blocks(params):
    """How many rows each input class gets: the batch split into len(ROW_CLASSES) blocks as
    evenly as possible (a batch smaller than that leaves the last classes out)."""
    batch = int(params["batch"])
    if batch <= 0:
        raise ValueError("obs_normalizer: batch must be at least 1, not %d" % batch)
    return [len(b) for b in np.array_split(np.arange(batch), len(ROW_CLASSES))]


def column_classes(params):
    """Variance class of each feature: the last two have near-zero and zero variance."""
    n = int(params["obs_dim"])
    if n < 3:
        raise ValueError("obs_normalizer: obs_dim must be at least 3, not %d" % n)
    return ["ordinary"] * (n - 2) + ["near_zero_var", "zero_var"]


def make_weights(params):
    """Running statistics as a normalizer has them after training: mean and var per feature."""
    rng = np.random.RandomState(int(params["seed"]) + 3)
    dtype = np.dtype(params["dtype"])
    n = int(params["obs_dim"])
    mean = rng.uniform(-2.0, 2.0, size=n)
    var = np.exp(rng.uniform(-3.0, 3.0, size=n))
    var[-2] = NEAR_ZERO_VAR
    var[-1] = 0.0
    return {"mean": mean.astype(dtype), "var": var.astype(dtype)}


def _row_values(cls, rng, size, dtype, mean, std):
    info = np.finfo(dtype)
    if cls == "ordinary":
        return mean + std * rng.standard_normal(size)
    if cls == "huge":
        # Half just below the dtype's maximum (overflows when divided by a small std),
        # half a large ordinary magnitude; random signs.
        magnitude = np.where(rng.uniform(size=size) < 0.5, float(info.max) * 0.9, float(info.max) ** 0.5)
        return magnitude * np.sign(rng.uniform(-1.0, 1.0, size=size))
    if cls == "denormal":
        return (
            float(info.tiny) * rng.uniform(0.01, 0.9, size=size) * np.sign(rng.uniform(-1.0, 1.0, size=size))
        )
    return np.full(size, {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}[cls])


def make_inputs(params):
    rng = np.random.RandomState(int(params["seed"]) + 4)
    dtype = np.dtype(params["dtype"])
    w = make_weights(params)
    mean, std = w["mean"].astype(np.float64), np.sqrt(w["var"].astype(np.float64))
    blocks = [
        _row_values(c, rng, (n, mean.size), dtype, mean, std) for c, n in zip(ROW_CLASSES, row_blocks(params))
    ]
    with np.errstate(over="ignore"):
        return [np.concatenate(blocks).astype(dtype)]


def element_classes(params):
    """The class of every element of the input (and output): its row's class, or for
    ordinary rows its column's variance class."""
    cols = column_classes(params)
    out = []
    for cls, rows in zip(ROW_CLASSES, row_blocks(params)):
        for _ in range(rows):
            out.append(cols if cls == "ordinary" else [cls] * len(cols))
    return np.array(out, dtype=object)


def comparator_options(params):
    return {"normalizer_classes": {"classes": element_classes(params), "clip": float(params["clip"])}}


def build_cell(params, weights):
    """Runs in a worker: the normalizer with its statistics as parameters."""
    import mindspore
    from mindspore import nn, ops

    dtype = np.dtype(params["dtype"])
    clip = float(params["clip"])
    eps = float(params["eps"])

    class Normalizer(nn.Cell):
        def __init__(self):
            super(Normalizer, self).__init__()
            self.mean = mindspore.Parameter(mindspore.Tensor(weights["mean"]), name="mean")
            self.var = mindspore.Parameter(mindspore.Tensor(weights["var"]), name="var")
            self.eps = mindspore.Tensor(np.asarray(eps, dtype=dtype))
            self.lo = mindspore.Tensor(np.asarray(-clip, dtype=dtype))
            self.hi = mindspore.Tensor(np.asarray(clip, dtype=dtype))
            self.sqrt = ops.Sqrt()
            self.maximum = ops.Maximum()
            self.minimum = ops.Minimum()

        def construct(self, obs):
            z = (obs - self.mean) / self.sqrt(self.var + self.eps)
            return self.minimum(self.maximum(z, self.lo), self.hi)

    return Normalizer()
