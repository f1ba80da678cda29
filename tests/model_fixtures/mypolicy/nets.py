"""Policies a user trains, built the way training builds them: ``build_actor(kind=...)`` returns
the ``nn.Cell`` with the framework's own initial weights; training (here: ``export.py``) sets
the weights and saves a checkpoint. Every policy takes ``obs`` [batch, 11] float32.

Runs inside a MindSpore stack (2.0 on Python 3.7, 2.10 on 3.11). MindSpore's graph compiler reads
each cell's ``construct`` from this file, so the cells are module-level classes.
"""

import mindspore as ms
import numpy as np
from mindspore import dtype as mstype
from mindspore import nn, ops

OBS, HIDDEN, ACTIONS = 11, 32, 4
KINDS = (
    "elu_gauss",
    "silu_value",
    "greedy_argmax",
    "fp16_mlp",
    "normalized_softmax",
    "gelu_softplus",
    "leaky_entropy",
)


class EluGauss(nn.Cell):
    """ELU trunk, Gaussian head: tanh mean and a state-independent std (exp of a clipped log-std)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.l2 = nn.Dense(HIDDEN, HIDDEN)
        self.mu = nn.Dense(HIDDEN, 2)
        self.act = nn.ELU()
        self.tanh = nn.Tanh()
        self.log_std = ms.Parameter(ms.Tensor(np.zeros((2,), np.float32)), name="log_std")
        self.exp = ops.Exp()

    def construct(self, obs):
        h = self.act(self.l2(self.act(self.l1(obs))))
        std = self.exp(ops.clip_by_value(self.log_std, -5.0, 2.0)) + 0.0 * h[:, :2]
        return self.tanh(self.mu(h)), std


class SiluValue(nn.Cell):
    """SiLU trunk (nn.SiLU), an actor's logits and a critic's value."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.act = nn.SiLU()
        self.logits = nn.Dense(HIDDEN, ACTIONS)
        self.value = nn.Dense(HIDDEN, 1)

    def construct(self, obs):
        h = self.act(self.l1(obs))
        return self.logits(h), self.value(h)


class GreedyArgmax(nn.Cell):
    """A discrete policy served greedily: the argmax action (int32) and its logits."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.act = nn.ReLU()
        self.logits = nn.Dense(HIDDEN, ACTIONS)
        self.argmax = ops.Argmax(axis=-1, output_type=mstype.int32)

    def construct(self, obs):
        logits = self.logits(self.act(self.l1(obs)))
        return self.argmax(logits), logits


class Fp16Mlp(nn.Cell):
    """Mixed precision as training frameworks do it: the layers compute in float16 (Dense
    ``to_float``), the input and the output stay float32."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN).to_float(mstype.float16)
        self.l2 = nn.Dense(HIDDEN, ACTIONS).to_float(mstype.float16)
        self.act = nn.ReLU()
        self.cast = ops.Cast()

    def construct(self, obs):
        return self.cast(self.l2(self.act(self.l1(obs))), mstype.float32)


class NormalizedSoftmax(nn.Cell):
    """An observation normalizer folded into the policy ((obs - mean) / std, clipped to +-5),
    a tanh trunk and action probabilities."""

    def __init__(self):
        super().__init__()
        self.mean = ms.Parameter(ms.Tensor(np.zeros((OBS,), np.float32)), name="obs_mean")
        self.inv_std = ms.Parameter(ms.Tensor(np.ones((OBS,), np.float32)), name="obs_inv_std")
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.tanh = nn.Tanh()
        self.logits = nn.Dense(HIDDEN, ACTIONS)
        self.softmax = nn.Softmax(axis=-1)

    def construct(self, obs):
        x = ops.clip_by_value((obs - self.mean) * self.inv_std, -5.0, 5.0)
        return self.softmax(self.logits(self.tanh(self.l1(x))))


class GeluSoftplus(nn.Cell):
    """GeLU trunk, a mean and a softplus std."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.act = nn.GELU(approximate=False)
        self.mu = nn.Dense(HIDDEN, 2)
        self.sd = nn.Dense(HIDDEN, 2)
        self.softplus = ops.Softplus()

    def construct(self, obs):
        h = self.act(self.l1(obs))
        return self.mu(h), self.softplus(self.sd(h)) + 1e-3


class LeakyEntropy(nn.Cell):
    """LeakyReLU trunk, log-probabilities and the policy's entropy (a reduction over actions)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(OBS, HIDDEN)
        self.act = nn.LeakyReLU(0.1)
        self.logits = nn.Dense(HIDDEN, ACTIONS)
        self.log_softmax = nn.LogSoftmax(axis=-1)
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=False)

    def construct(self, obs):
        logp = self.log_softmax(self.logits(self.act(self.l1(obs))))
        return logp, -self.sum(self.exp(logp) * logp, -1)


class PendulumGauss(nn.Cell):
    """A Pendulum-v1 policy (3 observation values, 1 action): a tanh trunk, the Gaussian's mean
    scaled to the torque bounds (+-2) and a state-independent std."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(3, HIDDEN)
        self.tanh = nn.Tanh()
        self.mu = nn.Dense(HIDDEN, 1)
        self.log_std = ms.Parameter(ms.Tensor(np.zeros((1,), np.float32)), name="log_std")
        self.exp = ops.Exp()

    def construct(self, obs):
        h = self.tanh(self.l1(obs))
        std = self.exp(ops.clip_by_value(self.log_std, -5.0, 2.0)) + 0.0 * h[:, :1]
        return 2.0 * self.tanh(self.mu(h)), std


class CartPoleLogits(nn.Cell):
    """A CartPole-v1 policy (4 observation values, 2 discrete actions): a ReLU trunk and the
    actions' logits."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(4, HIDDEN)
        self.act = nn.ReLU()
        self.logits = nn.Dense(HIDDEN, 2)

    def construct(self, obs):
        return self.logits(self.act(self.l1(obs)))


class PpoActor(nn.Cell):
    """PPO's actor as trainers export it for Pendulum-v1: obs [batch, 3] and actions [batch, 1] in;
    a tanh trunk of two layers, the Gaussian's mean (a tanh), its std (the exp of a
    state-independent log-std) and the log-probability of the given actions out, computed in
    the graph as the trainer's importance ratio needs it."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Dense(3, HIDDEN)
        self.l2 = nn.Dense(HIDDEN, HIDDEN)
        self.mu = nn.Dense(HIDDEN, 1)
        self.tanh = nn.Tanh()
        self.log_std = ms.Parameter(ms.Tensor(np.full((1,), -0.5, np.float32)), name="log_std")
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=False)
        self.half_log_2pi = ms.Tensor(np.float32(0.5 * np.log(2.0 * np.pi)))

    def construct(self, obs, actions):
        h = self.tanh(self.l2(self.tanh(self.l1(obs))))
        mean = self.tanh(self.mu(h))
        log_std = ops.clip_by_value(self.log_std, -5.0, 2.0) + 0.0 * mean
        std = self.exp(log_std)
        z = (actions - mean) / std
        logp = self.sum(-0.5 * z * z - log_std - self.half_log_2pi, -1)
        return mean, std, logp


class Embed(nn.Cell):
    """A Dense layer whose output is scaled up by its own operation (a reward or observation
    scale folded into the first layer): activations reach about 1e5, past float16's 65,504."""

    def __init__(self, scale):
        super().__init__()
        self.dense = nn.Dense(OBS, HIDDEN)
        self.scale = scale

    def construct(self, obs):
        return self.dense(obs) * self.scale


class OverflowNorm(nn.Cell):
    """Trained in float32: the first layer's activations overflow float16 (Embed), a LayerNorm
    brings them back, a tanh trunk, a Gaussian mean and a softplus std head."""

    def __init__(self):
        super().__init__()
        self.embed = Embed(3.0e4)
        self.norm = nn.LayerNorm((HIDDEN,))
        self.l2 = nn.Dense(HIDDEN, HIDDEN)
        self.mu = nn.Dense(HIDDEN, 2)
        self.std_head = nn.Dense(HIDDEN, 2)
        self.tanh = nn.Tanh()
        self.exp = ops.Exp()
        self.log = ops.Log()
        self.abs = ops.Abs()
        self.relu = ops.ReLU()

    def construct(self, obs):
        h = self.tanh(self.l2(self.tanh(self.norm(self.embed(obs)))))
        x = self.std_head(h)
        std = self.relu(x) + self.log(1.0 + self.exp(-self.abs(x))) + 1e-3  # softplus, stable
        return self.tanh(self.mu(h)), std


CELLS = {
    "elu_gauss": EluGauss,
    "silu_value": SiluValue,
    "greedy_argmax": GreedyArgmax,
    "fp16_mlp": Fp16Mlp,
    "normalized_softmax": NormalizedSoftmax,
    "gelu_softplus": GeluSoftplus,
    "leaky_entropy": LeakyEntropy,
    "pendulum_gauss": PendulumGauss,
    "cartpole_logits": CartPoleLogits,
    "ppo_actor": PpoActor,
    "overflow_norm": OverflowNorm,
}
OBS_OF = {"pendulum_gauss": 3, "cartpole_logits": 4, "ppo_actor": 3}
"""Policies whose observation is not OBS values (exported only when named: not in KINDS)."""
ACTIONS_OF = {"ppo_actor": 1}
"""Policies that also take the actions to score (their log-probability is an output)."""


def build_actor(kind="elu_gauss"):
    """The factory: the network of ``kind`` with MindSpore's initial weights (training sets them)."""
    cell = CELLS[kind]()
    cell.set_train(False)
    return cell


def train(cell, seed):
    """What training does to the weights, for the tests: seeded values, and a normalizer's
    statistics away from the identity."""
    params = sorted(cell.parameters_and_names(), key=lambda kv: kv[0])
    for i, (name, p) in enumerate(params):
        rng = np.random.RandomState(seed * 1009 + i)
        shape = tuple(p.shape)
        if name.endswith("obs_inv_std"):
            value = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("obs_mean"):
            value = rng.uniform(-0.5, 0.5, shape)
        else:
            fan_in = shape[-1] if len(shape) > 1 else 4
            value = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        p.set_data(ms.Tensor(np.asarray(value).astype(p.asnumpy().dtype)))
    return cell
