"""A policy head that computes the same wrong thing on every stack, for the per-side checks.

Both stacks of a pair agree on its outputs, so pair comparison stays green; only the checks
of each side alone (auditor.policy.invariants) can catch it. Variants:

- ``ok``: std = exp(log_std), action = max_action * tanh(mean): nothing fires;
- ``negative-std``: std = -exp(log_std), an impossible standard deviation;
- ``unbounded``: action = mean * 1e3, far outside ±max_action for swept inputs;
- ``nan-masked``: the observation's NaN/Inf are clipped to ±1 before the layer (Maximum /
  Minimum), so a broken observation becomes an ordinary action.

Python 3.7 compatible: it runs inside the stacks.
"""

import numpy as np

NAME = "wrong_policy"
VERSION = "1"
INPUTS = ("obs",)
OUTPUTS = ("mean", "std", "action")
DEFAULT_PARAMS = {"obs_dim": 3, "batch": 64, "seed": 0, "dtype": "float32", "fault": "ok", "max_action": 2.0}
VARIANTS = {
    "ok": {"fault": "ok"},
    "negative-std": {"fault": "negative-std"},
    "unbounded": {"fault": "unbounded"},
    "nan-masked": {"fault": "nan-masked"},
}
NAN_PROPAGATES = ("mean", "action")
INPUT_CLASSES = ("sweep", "nan-inf")
# No float64 reference on purpose: its NaN/Inf hazards are judged the way a plugin probe
# without one is (any finite value out of a non-finite input).


def computed_from(params):
    return {"action": ("mean",)}


def invariants(params):
    bound = float(params["max_action"])
    return [
        {"output": "std", "check": "positive"},
        {"output": "action", "check": "within", "low": -bound, "high": bound},
    ]


def make_weights(params):
    rng = np.random.RandomState(int(params["seed"]))
    n = int(params["obs_dim"])
    return {
        "w": (rng.standard_normal((1, n)) / np.sqrt(n)).astype(np.float32),
        "b": np.zeros((1,), np.float32),
        "log_std": np.full((1,), -0.5, np.float32),
    }


def make_inputs(params):
    rng = np.random.RandomState(int(params["seed"]) + 1)
    return [rng.uniform(-1.0, 1.0, size=(int(params["batch"]), int(params["obs_dim"]))).astype(np.float32)]


def build_cell(params, weights):
    import mindspore
    from mindspore import nn, ops

    fault = params["fault"]
    max_action = float(params["max_action"])

    class Head(nn.Cell):
        def __init__(self):
            super(Head, self).__init__()
            self.w = mindspore.Parameter(mindspore.Tensor(weights["w"]), name="w")
            self.b = mindspore.Parameter(mindspore.Tensor(weights["b"]), name="b")
            self.log_std = mindspore.Parameter(mindspore.Tensor(weights["log_std"]), name="log_std")
            self.matmul = ops.MatMul(transpose_b=True)
            self.tanh = ops.Tanh()
            self.exp = ops.Exp()
            self.maximum = ops.Maximum()
            self.minimum = ops.Minimum()
            self.zeros_like = ops.ZerosLike()
            self.one = mindspore.Tensor(np.float32(1.0))
            self.lo = mindspore.Tensor(np.float32(-1.0))
            self.scale = mindspore.Tensor(np.float32(max_action))
            self.big = mindspore.Tensor(np.float32(1e3))
            self.sign = mindspore.Tensor(np.float32(-1.0 if fault == "negative-std" else 1.0))
            self.masked = fault == "nan-masked"
            self.unbounded = fault == "unbounded"

        def construct(self, obs):
            if self.masked:
                obs = self.minimum(self.maximum(obs, self.lo), self.one)
            mean = self.matmul(obs, self.w) + self.b
            std = self.sign * self.exp(self.log_std) + self.zeros_like(mean)
            if self.unbounded:  # noqa: SIM108 (an if block compiles in every graph mode)
                action = mean * self.big
            else:
                action = self.scale * self.tanh(mean)
            return mean, std, action

    return Head()
