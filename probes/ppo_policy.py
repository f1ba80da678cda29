"""PPO Gaussian policy: obs -> tanh MLP -> mean, plus a state-independent log-std -> std.

This is the shape of the actor that PPO trains for continuous control (Pendulum, MuJoCo).
Weights come from a numpy seed rather than MindSpore's initializer, which changed between
2.0 and 2.10, so any difference between the stacks is the runtime's, not the initializer's.
"""

import numpy as np

NAME = "ppo_policy"
VERSION = "1"
INPUTS = ("obs",)
OUTPUTS = ("mean", "std")
DEFAULT_PARAMS = {
    "obs_dim": 3,
    "act_dim": 1,
    "hidden": [64, 64],
    "batch": 256,
    "seed": 0,
    "dtype": "float32",
}


def layer_sizes(params):
    return [int(params["obs_dim"])] + [int(h) for h in params["hidden"]] + [int(params["act_dim"])]


def make_weights(params):
    """Orthogonal-ish scaled Gaussian weights, as PPO implementations initialise them."""
    rng = np.random.RandomState(int(params["seed"]))
    dtype = np.dtype(params["dtype"])
    sizes = layer_sizes(params)
    weights = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        gain = 0.01 if i == len(sizes) - 2 else np.sqrt(2.0)
        weights["fc%d.weight" % i] = (rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in)).astype(dtype)
        weights["fc%d.bias" % i] = (rng.standard_normal(n_out) * 0.1).astype(dtype)
    weights["log_std"] = np.full((int(params["act_dim"]),), -0.5, dtype=dtype)
    return weights


def make_inputs(params):
    """A batch of observations in Pendulum's range: cos, sin in [-1, 1], velocity in [-8, 8]."""
    rng = np.random.RandomState(int(params["seed"]) + 1)
    dtype = np.dtype(params["dtype"])
    obs = rng.uniform(-1.0, 1.0, size=(int(params["batch"]), int(params["obs_dim"])))
    obs[:, -1] *= 8.0
    return [obs.astype(dtype)]


def build_cell(params, weights):
    """Runs in a worker: the MindSpore cell with the given weights."""
    import mindspore
    from mindspore import nn, ops

    sizes = layer_sizes(params)

    class GaussianPolicy(nn.Cell):
        def __init__(self):
            super(GaussianPolicy, self).__init__()
            layers = []
            for i in range(len(sizes) - 1):
                layers.append(
                    nn.Dense(
                        sizes[i],
                        sizes[i + 1],
                        weight_init=mindspore.Tensor(weights["fc%d.weight" % i]),
                        bias_init=mindspore.Tensor(weights["fc%d.bias" % i]),
                    )
                )
            self.hidden = nn.CellList(layers[:-1])
            self.head = layers[-1]
            self.log_std = mindspore.Parameter(mindspore.Tensor(weights["log_std"]), name="log_std")
            self.tanh = ops.Tanh()
            self.exp = ops.Exp()
            self.zeros_like = ops.ZerosLike()

        def construct(self, obs):
            h = obs
            for layer in self.hidden:
                h = self.tanh(layer(h))
            mean = self.head(h)
            std = self.exp(self.log_std) + self.zeros_like(mean)
            return mean, std

    return GaussianPolicy()
