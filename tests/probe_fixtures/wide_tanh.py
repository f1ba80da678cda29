"""A network whose hidden tanh is fed from a wide layer, for the per-layer side checks.

obs (4) -> wide Dense (4 -> 256, no activation) -> Dense (256 -> 8) -> tanh, the hidden
layer -> Dense (8 -> 1, small gain) -> value. The value scales the hidden layer down by
1e-2, so a tanh that leaves [-1, 1] by a few ULPs never shows in it; only the hidden
layer, exposed and checked on each side alone, can tell. Its pre-activations are solved
from the weights through the wide layer (the ``layer-sweep`` input class), 1024 rows
through [-12, 12]: steps of 0.023, fine enough for any band of a tanh kernel's
approximation wider than that.

Python 3.7 compatible: it runs inside the stacks.
"""

import numpy as np

NAME = "wide_tanh"
VERSION = "1"
INPUTS = ("obs",)
OUTPUTS = ("value",)
DEFAULT_PARAMS = {"obs_dim": 4, "wide": 256, "hidden": 8, "batch": 1024, "seed": 0, "dtype": "float32"}
NAN_PROPAGATES = ("value",)
INPUT_CLASSES = ("layer-sweep", "nan-inf")


def make_weights(params):
    rng = np.random.RandomState(int(params["seed"]) + 5)
    n, wide, hidden = int(params["obs_dim"]), int(params["wide"]), int(params["hidden"])
    return {
        "wide.weight": (rng.standard_normal((wide, n)) / np.sqrt(n)).astype(np.float32),
        "wide.bias": (rng.standard_normal(wide) * 0.1).astype(np.float32),
        "hidden.weight": (rng.standard_normal((hidden, wide)) / np.sqrt(wide)).astype(np.float32),
        "hidden.bias": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "out.weight": (rng.standard_normal((1, hidden)) * 0.01).astype(np.float32),
        "out.bias": np.zeros(1, np.float32),
    }


def make_inputs(params):
    rng = np.random.RandomState(int(params["seed"]) + 6)
    return [rng.uniform(-1.0, 1.0, size=(int(params["batch"]), int(params["obs_dim"]))).astype(np.float32)]


def layer_names(params):
    return ["hidden"]


def hidden_layers(params, weights):
    return [
        ("wide", weights["wide.weight"], weights["wide.bias"], "identity"),
        ("hidden", weights["hidden.weight"], weights["hidden.bias"], "tanh"),
    ]


def invariants(params):
    return [
        {"output": "hidden", "check": "within", "low": -1.0, "high": 1.0},
        {"output": "value", "check": "finite", "classes": ("random", "sweep-wide", "sweep-hidden")},
    ]


def computed_from(params):
    return {"value": ("hidden",)}


def _dense(h, weights, name):
    return np.einsum("bi,oi->bo", h, weights[name + ".weight"].astype(np.float64)) + weights[name + ".bias"]


def reference(params, weights, inputs):
    obs = np.asarray(inputs[0], dtype=np.float64)
    hidden = np.tanh(_dense(_dense(obs, weights, "wide"), weights, "hidden"))
    return {"hidden": hidden, "value": _dense(hidden, weights, "out")}


def build_cell(params, weights, expose_layers=False):
    import mindspore
    from mindspore import nn, ops

    def dense(name, n_in, n_out):
        return nn.Dense(
            n_in,
            n_out,
            weight_init=mindspore.Tensor(weights[name + ".weight"]),
            bias_init=mindspore.Tensor(weights[name + ".bias"]),
        )

    n, wide, hidden = int(params["obs_dim"]), int(params["wide"]), int(params["hidden"])

    class WideTanh(nn.Cell):
        def __init__(self):
            super(WideTanh, self).__init__()
            self.wide = dense("wide", n, wide)
            self.hidden = dense("hidden", wide, hidden)
            self.out = dense("out", hidden, 1)
            self.tanh = ops.Tanh()
            self.expose_layers = bool(expose_layers)

        def construct(self, obs):
            h = self.tanh(self.hidden(self.wide(obs)))
            value = self.out(h)
            if self.expose_layers:
                return value, h
            return value

    return WideTanh()
