"""Categorical policy for a CartPole-sized task: obs (4) -> tanh MLP -> logits (2) -> probs.

Runs in two places: ``make_weights``/``make_inputs`` in the auditor (numpy only), and
``build_cell`` inside the training stack's worker, which may be Python 3.7: keep this module
free of 3.8+ syntax and import MindSpore only inside ``build_cell``.
"""

import numpy as np

NAME = "discrete_policy"
VERSION = "1"
INPUTS = ("obs",)
OUTPUTS = ("logits", "probs")
DEFAULT_PARAMS = {"obs_dim": 4, "n_actions": 2, "hidden": [64, 64], "batch": 256, "seed": 0}
# Extra comparisons the auditor runs on this probe's outputs (see comparators.py).
COMPARATORS = ("argmax_agreement", "probability_difference")


def layer_sizes(params):
    return [int(params["obs_dim"])] + [int(h) for h in params["hidden"]] + [int(params["n_actions"])]


def make_weights(params):
    rng = np.random.RandomState(int(params["seed"]))
    sizes = layer_sizes(params)
    weights = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        gain = 0.01 if i == len(sizes) - 2 else np.sqrt(2.0)
        weights["fc%d.weight" % i] = (rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in)).astype(
            np.float32
        )
        weights["fc%d.bias" % i] = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
    return weights


def make_inputs(params):
    """CartPole-like observations: position, velocity, angle, angular velocity."""
    rng = np.random.RandomState(int(params["seed"]) + 1)
    scale = np.array([2.4, 3.0, 0.21, 3.5])[: int(params["obs_dim"])]
    obs = rng.uniform(-1.0, 1.0, size=(int(params["batch"]), int(params["obs_dim"]))) * scale
    return [obs.astype(np.float32)]


def build_cell(params, weights):
    """Runs in the training stack's worker: the MindSpore cell with the given weights."""
    import mindspore
    from mindspore import nn, ops

    sizes = layer_sizes(params)

    class CategoricalPolicy(nn.Cell):
        def __init__(self):
            super(CategoricalPolicy, self).__init__()
            self.layers = nn.CellList(
                [
                    nn.Dense(
                        sizes[i],
                        sizes[i + 1],
                        weight_init=mindspore.Tensor(weights["fc%d.weight" % i]),
                        bias_init=mindspore.Tensor(weights["fc%d.bias" % i]),
                    )
                    for i in range(len(sizes) - 1)
                ]
            )
            self.tanh = ops.Tanh()
            self.softmax = ops.Softmax(axis=-1)

        def construct(self, obs):
            h = obs
            for i in range(len(self.layers) - 1):
                h = self.tanh(self.layers[i](h))
            logits = self.layers[len(self.layers) - 1](h)
            return logits, self.softmax(logits)

    return CategoricalPolicy()
