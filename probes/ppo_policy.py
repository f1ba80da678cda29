"""PPO Gaussian policy: obs -> tanh MLP -> mean, a state-independent log-std -> std, and the
log-probability of given actions, computed inside the exported cell.

This is the shape of the actor that PPO trains for continuous control (Pendulum, MuJoCo).
Weights come from a numpy seed rather than MindSpore's initializer, which changed between
2.0 and 2.10, so any difference between the stacks is the runtime's, not the initializer's.

Variants: fp32 and fp16 (weights, inputs and every operation in that dtype), each with an
unbounded Gaussian head or a tanh-squashed one. The log-probability is part of the graph, as
an RL trainer computes it for its importance ratios, so a runtime's Log/Exp/Tanh kernels show
in it. The tanh head's log-probability of an action a in [-1, 1] is

    log N(u; mean, std) - sum log(1 - tanh(u)^2),   u = atanh(clip(a, -1 + eps, 1 - eps))

with the correction in its stable form 2 (log 2 - u - softplus(-2u)) (auditor.compare.metrics holds
the float64 reference). fp16 needs a larger eps: 1 - 1e-6 rounds to 1 in fp16.
"""

import math

import numpy as np

NAME = "ppo_policy"
VERSION = "2"
INPUTS = ("obs", "actions")
OUTPUTS = ("mean", "std", "logp", "action")
DEFAULT_PARAMS = {
    "obs_dim": 3,
    "act_dim": 1,
    "hidden": [64, 64],
    "batch": 256,
    "seed": 0,
    "dtype": "float32",
    "head": "gaussian",
    "eps": 1e-6,
    "max_action": 2.0,
}
VARIANTS = {
    "fp32": {"dtype": "float32", "head": "gaussian", "eps": 1e-6},
    "fp16": {"dtype": "float16", "head": "gaussian", "eps": 1e-3},
    "tanh-fp32": {"dtype": "float32", "head": "tanh", "eps": 1e-6},
    "tanh-fp16": {"dtype": "float16", "head": "tanh", "eps": 1e-3},
}
PARAMS = {
    "obs_dim": {"type": "integer", "minimum": 1, "maximum": 4096},
    "act_dim": {"type": "integer", "minimum": 1, "maximum": 1024},
    "hidden": {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 4096},
        "minItems": 1,
        "maxItems": 16,
    },
    "batch": {"type": "integer", "minimum": 1, "maximum": 65536},
    "seed": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    "dtype": {"type": "string", "enum": ["float32", "float16"]},
    "head": {"type": "string", "enum": ["gaussian", "tanh"]},
    "eps": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
    "max_action": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
}
"""The parameters' types and ranges: auditor.toml's [probes.ppo_policy.params] is checked
against them."""
COMPARATORS = (
    "gaussian_kl",
    "logp_diff",
    "action_agreement",
    "finite_where_train_finite",
    "importance_ratios",
)
HEADS = ("gaussian", "tanh")


def comparator_options(params):
    """The policy the importance ratios are drawn from: the head's distribution of (mean, std),
    and the cell's own log-probability ``logp`` of its ``actions`` input (for the tanh head,
    of squashed actions), which the cycle runs on actions drawn from the infer side."""
    return {
        "importance_ratios": {
            "kind": "tanh" if params["head"] == "tanh" else "gaussian",
            "mean": "mean",
            "std": "std",
            "logp": "logp",
            "actions": "actions",
        }
    }


def _ulp(values, dtype):
    """One unit in the last place of ``dtype`` at each value (float64 result)."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    return np.abs(np.spacing(v.astype(dtype))).astype(np.float64)


def rounding(params):
    """Per element of ``logp`` on the probe's own inputs: how far two correct evaluations of
    the cell's formula in its dtype can be apart, propagated to first order from one unit in
    the last place (ULP) of each rounded quantity, from the float64 reference.

    The tanh head is ill-conditioned near actions of ±1: u = (log(1 + a) - log(1 - a)) / 2
    carries the rounding of log(1 - a) (|log(1 - a)| up to 6.9 at a = 1 - 1e-3, where an fp16
    ULP is 2**-8), and logp moves by |d logp / du| = |-(u - mean) / std**2 + 2 tanh(u)| per unit
    of u (up to ~10). So two fp16 runtimes legitimately differ by several fp16 ULPs of logp
    there (0.02 to 0.06), while an ordinary element's envelope is ~1e-3. Terms, per action
    dimension: |d logp / du| (ULP(log(1 + a)) / 2 + ULP(log(1 - a)) / 2 + ULP(u)) +
    |z / std| ULP(mean) + ULP(z**2 / 2) + ULP(log-det), plus ULP(logp) for the sum; the
    Gaussian head's: |z / std| (ULP(a - mean) + ULP(mean)) + ULP(z**2 / 2), plus ULP(logp).
    Checked against a numpy emulation of the cell op by op in fp16
    (tests/unit/compare/test_rounding_envelope.py)."""
    dtype = np.dtype(params["dtype"])
    weights, inputs = make_weights(params), make_inputs(params)
    ref = reference(params, weights, inputs)
    mean, std = ref["mean"], ref["std"]
    actions = np.asarray(inputs[1], dtype=np.float64)
    if params["head"] == "tanh":
        eps = float(params["eps"])
        lo, hi = float(np.asarray(-1.0 + eps, dtype=dtype)), float(np.asarray(1.0 - eps, dtype=dtype))
        a = np.clip(actions, lo, hi)
        log_plus, log_minus = np.log1p(a), np.log1p(-a)
        u = 0.5 * (log_plus - log_minus)
        z = (u - mean) / std
        slope = np.abs(-z / std + 2.0 * np.tanh(u))
        du = 0.5 * (_ulp(log_plus, dtype) + _ulp(log_minus, dtype)) + _ulp(u, dtype)
        log_det = 2.0 * (math.log(2.0) - u - _softplus(-2.0 * u))
        per_dim = (
            slope * du + np.abs(z / std) * _ulp(mean, dtype) + _ulp(0.5 * z * z, dtype) + _ulp(log_det, dtype)
        )
    else:
        z = (actions - mean) / std
        shift = _ulp(actions - mean, dtype) + _ulp(mean, dtype)
        per_dim = np.abs(z / std) * shift + _ulp(0.5 * z * z, dtype)
    return {"logp": per_dim.sum(axis=-1) + _ulp(ref["logp"], dtype)}


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


def boundary_actions(params):
    """The fixed actions every batch starts with: the edges where log-probabilities break.
    For the tanh head ±1 (clipped to ±(1 - eps) inside the cell), just inside them, and 0;
    for the Gaussian head, the same plus far tails."""
    eps = float(params["eps"])
    values = [1.0, -1.0, 1.0 - eps / 2, -(1.0 - eps / 2), 1.0 - 4 * eps, 0.0]
    if params["head"] == "gaussian":
        values += [5.0, -5.0]
    return values


def make_inputs(params):
    """Observations in Pendulum's range (cos, sin in [-1, 1], velocity in [-8, 8]) and fixed
    actions to score: the boundary values first, then uniform in [-1, 1] (tanh head) or
    standard normal (Gaussian head)."""
    if params["head"] not in HEADS:
        raise ValueError("ppo_policy: head must be one of %s, not %r" % (", ".join(HEADS), params["head"]))
    rng = np.random.RandomState(int(params["seed"]) + 1)
    dtype = np.dtype(params["dtype"])
    batch, act_dim = int(params["batch"]), int(params["act_dim"])
    obs = rng.uniform(-1.0, 1.0, size=(batch, int(params["obs_dim"])))
    obs[:, -1] *= 8.0
    if params["head"] == "tanh":
        actions = rng.uniform(-1.0, 1.0, size=(batch, act_dim))
    else:
        actions = rng.standard_normal((batch, act_dim))
    edges = boundary_actions(params)[:batch]
    actions[: len(edges)] = np.asarray(edges, dtype=np.float64)[:, None]
    return [obs.astype(dtype), actions.astype(dtype)]


# Checked on each stack's outputs alone (auditor.policy.invariants): what any correct runtime computes.
NAN_PROPAGATES = ("mean", "logp", "action")
ORDINARY = ("random", "sweep")


def invariants(params):
    """std = exp(log_std) is positive whatever the input; the action stays within
    ±max_action (clipped or squashed); mean and logp are finite for ordinary inputs (at
    fp16's edges the probe's own first layer may overflow, on any runtime); every hidden
    layer, a tanh, stays within [-1, 1] (at fp16's edges its pre-activation may overflow to
    NaN, so those inputs are left out)."""
    bound = float(params["max_action"])
    layers = layer_names(params)
    swept = ORDINARY + ("magnitude",) + tuple("sweep-" + n for n in layers)
    return [
        {"output": "std", "check": "positive"},
        {"output": "std", "check": "finite"},
        {
            "output": "action",
            "check": "within",
            "low": -bound,
            "high": bound,
            "classes": ORDINARY + ("magnitude",),
        },
        {"output": "mean", "check": "finite", "classes": ORDINARY},
        {"output": "logp", "check": "finite", "classes": ORDINARY},
    ] + [{"output": n, "check": "within", "low": -1.0, "high": 1.0, "classes": swept} for n in layers]


def computed_from(params):
    """What each output and layer is computed from: a breakage there explains one here."""
    layers = layer_names(params)
    graph = {"logp": ("mean", "std"), "action": ("mean",), "mean": tuple(layers[-1:])}
    for before, after in zip(layers[:-1], layers[1:]):
        graph[after] = (before,)
    return graph


def hidden_layers(params, weights):
    """The hidden Dense layers from obs on, each followed by its tanh (the input classes
    solve for observations that sweep each unit's pre-activation)."""
    return [
        ("fc%d" % i, weights["fc%d.weight" % i], weights["fc%d.bias" % i], "tanh")
        for i in range(len(layer_sizes(params)) - 2)
    ]


def _dense(h, weight, bias):
    """h @ weight.T + bias in float64. Rows whose values are all finite go through BLAS (a
    batch of 32,768 rows in milliseconds); the others element by element, where ±Inf times a
    weight is ±Inf and Inf - Inf is NaN, as in IEEE (BLAS kernels need not keep that)."""
    w = weight.astype(np.float64)
    finite = np.isfinite(h).all(axis=1)
    if finite.all():
        return h @ w.T + bias.astype(np.float64)
    out = np.empty((h.shape[0], w.shape[0]))
    out[finite] = h[finite] @ w.T
    out[~finite] = np.einsum("bi,oi->bo", h[~finite], w)
    return out + bias.astype(np.float64)


def _softplus(x):
    return np.maximum(x, 0.0) + np.log(1.0 + np.exp(-np.abs(x)))


def reference(params, weights, inputs):
    """The cell's forward pass in float64 numpy from the same weights and inputs (with its
    constants as the cell holds them, in the probe's dtype): every output and hidden layer."""
    dtype = np.dtype(params["dtype"])
    eps = float(params["eps"])

    def const(value):
        return float(np.asarray(value, dtype=dtype))

    obs, actions = [np.asarray(x, dtype=np.float64) for x in inputs]
    out = {}
    h = obs
    for name, weight, bias, _ in hidden_layers(params, weights):
        h = np.tanh(_dense(h, weight, bias))
        out[name] = h
    last = len(layer_sizes(params)) - 2
    mean = _dense(h, weights["fc%d.weight" % last], weights["fc%d.bias" % last])
    log_std = weights["log_std"].astype(np.float64)
    std = np.exp(log_std) + np.zeros_like(mean)
    half_log_2pi = const(0.5 * math.log(2.0 * math.pi))
    max_action = const(params["max_action"])
    if params["head"] == "tanh":
        a = np.minimum(np.maximum(actions, const(-1.0 + eps)), const(1.0 - eps))
        u = 0.5 * (np.log(1.0 + a) - np.log(1.0 - a))
        log_det = 2.0 * (const(math.log(2.0)) - u - _softplus(-2.0 * u))
        z = (u - mean) / std
        logp = (-0.5 * z * z - log_std - half_log_2pi - log_det).sum(axis=-1)
        action = max_action * np.tanh(mean)
    else:
        z = (actions - mean) / std
        logp = (-0.5 * z * z - log_std - half_log_2pi).sum(axis=-1)
        action = np.minimum(np.maximum(mean, -max_action), max_action)
    out.update({"mean": mean, "std": std, "logp": logp, "action": action})
    return out


def class_inputs(name, params, inputs):
    """The ``sweep`` class aimed at this policy's nonlinearities: row r drives one unit of the
    first layer to a pre-activation swept from -12 to 12 (tanh saturates beyond ~3; in fine
    steps through the transition), and the actions sweep the head's domain ([-1, 1] up to
    its clipped edges for the tanh head, ±6 standard deviations for the Gaussian one).
    Other classes: the generic batches (auditor.compare.input_classes)."""
    if name != "sweep":
        return None
    obs, actions = inputs
    w = make_weights(params)
    weight, bias = w["fc0.weight"].astype(np.float64), w["fc0.bias"].astype(np.float64)
    batch = obs.shape[0]
    targets = np.linspace(-12.0, 12.0, batch)
    units = np.arange(batch) % weight.shape[0]
    rows = weight[units]
    scale = (targets - bias[units]) / np.maximum((rows * rows).sum(axis=1), 1e-12)
    swept = rows * scale[:, None]
    edge = 1.0 if params["head"] == "tanh" else 6.0
    acts = np.repeat(np.linspace(-edge, edge, batch)[:, None], actions.shape[1], axis=1)
    dtype = obs.dtype
    return [swept.astype(dtype), acts.astype(actions.dtype)]


def layer_names(params):
    """The layers whose outputs build_cell(..., expose_layers=True) appends after the regular
    outputs, in order: each hidden Dense layer after its tanh, named like its weights, so
    divergence localization can name the layer whose weights or kernel went wrong. The last
    layer is not repeated: its output is the "mean" output (a graph output listed twice breaks
    MindSpore Lite 2.0's predict)."""
    return ["fc%d" % i for i in range(len(layer_sizes(params)) - 2)]


def build_cell(params, weights, expose_layers=False):
    """Runs in a worker: the MindSpore cell with the given weights, computing in params' dtype.
    Outputs: mean (pre-squash for the tanh head), std, logp of the given actions (one per
    sample), and the deterministic action (mean clipped to ±max_action, or max_action·tanh(mean)).
    With ``expose_layers`` the cell also returns every layer's output (see layer_names) after
    its regular outputs."""
    import mindspore
    from mindspore import nn, ops

    sizes = layer_sizes(params)
    dtype = np.dtype(params["dtype"])
    head = params["head"]
    eps = float(params["eps"])
    max_action = float(params["max_action"])

    def const(value):
        return mindspore.Tensor(np.asarray(value, dtype=dtype))

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
            self.log = ops.Log()
            self.abs = ops.Abs()
            self.maximum = ops.Maximum()
            self.minimum = ops.Minimum()
            self.sum = ops.ReduceSum(keep_dims=False)
            self.zeros_like = ops.ZerosLike()
            self.squash = head == "tanh"
            self.expose_layers = bool(expose_layers)
            self.half = const(0.5)
            self.one = const(1.0)
            self.two = const(2.0)
            self.zero = const(0.0)
            self.half_log_2pi = const(0.5 * math.log(2.0 * math.pi))
            self.log_2 = const(math.log(2.0))
            self.lo = const(-1.0 + eps)
            self.hi = const(1.0 - eps)
            self.max_action = const(max_action)
            self.min_action = const(-max_action)

        def softplus(self, x):
            # max(x, 0) + log(1 + exp(-|x|)): never overflows, in fp16 either.
            return self.maximum(x, self.zero) + self.log(self.one + self.exp(-self.abs(x)))

        def gaussian_logp(self, x, mean, std):
            z = (x - mean) / std
            return -self.half * z * z - self.log_std - self.half_log_2pi

        def construct(self, obs, actions):
            h = obs
            layers = ()
            for layer in self.hidden:
                h = self.tanh(layer(h))
                layers = layers + (h,)
            mean = self.head(h)
            std = self.exp(self.log_std) + self.zeros_like(mean)
            if self.squash:
                a = self.minimum(self.maximum(actions, self.lo), self.hi)
                u = self.half * (self.log(self.one + a) - self.log(self.one - a))
                log_det = self.two * (self.log_2 - u - self.softplus(-self.two * u))
                logp = self.sum(self.gaussian_logp(u, mean, std) - log_det, -1)
                action = self.max_action * self.tanh(mean)
            else:
                logp = self.sum(self.gaussian_logp(actions, mean, std), -1)
                action = self.minimum(self.maximum(mean, self.min_action), self.max_action)
            if self.expose_layers:
                return (mean, std, logp, action) + layers
            return mean, std, logp, action

    return GaussianPolicy()
