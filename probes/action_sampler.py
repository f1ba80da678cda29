"""Action sampler: draws a ~ N(mean, std) the two ways a policy can, inside the exported cell.

- ``reparam``: the noise is an input, a = mean + std * noise (the reparameterization trick).
  Both stacks get the same noise, so they must give the same actions.
- ``seeded-normal`` / ``seeded-uniform``: the noise comes from the framework's own seeded random
  op (StandardNormal / UniformReal with fixed seeds). The auditor checks that each stack repeats
  its numbers in a fresh process (RERUN_IN_FRESH_PROCESS), compares the two stacks' numbers
  element-wise, and, since different generators may legitimately draw different numbers,
  whether both sides' noise follows one distribution (two-sample KS on the ``noise`` output).
  An inference runtime without a kernel for the op reports "unsupported operator: NAME".

Outputs: ``sample`` (the action) and ``noise`` (the standard draw behind it, for the KS test).
"""

import numpy as np

NAME = "action_sampler"
VERSION = "1"
INPUTS = ("mean", "std", "noise")  # noise: the reparam variant only
OUTPUTS = ("sample", "noise")
DEFAULT_PARAMS = {
    "act_dim": 2,
    "batch": 512,
    "seed": 0,
    "dtype": "float32",
    "noise": "input",
}
VARIANTS = {
    "reparam": {"noise": "input"},
    "seeded-normal": {"noise": "normal"},
    "seeded-uniform": {"noise": "uniform"},
}
PARAMS = {
    "act_dim": {"type": "integer", "minimum": 1, "maximum": 1024},
    "batch": {"type": "integer", "minimum": 1, "maximum": 65536},
    "seed": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    "dtype": {"type": "string", "enum": ["float32", "float16"]},
    "noise": {"type": "string", "enum": ["input", "normal", "uniform"]},
}
"""The parameters' types and ranges: auditor.toml's [probes.action_sampler.params] is checked
against them."""
COMPARATORS = ("ks_two_sample", "finite_where_train_finite")
RERUN_IN_FRESH_PROCESS = ("seeded-normal", "seeded-uniform")
NOISE = ("input", "normal", "uniform")


# Checked on each stack's outputs alone (auditor.policy.invariants).
NAN_PROPAGATES = ("sample",)


def invariants(params):
    """Noise and samples of ordinary means are finite; uniform noise lies in [0, 1]."""
    out = [
        {"output": "noise", "check": "finite"},
        {"output": "sample", "check": "finite", "classes": ("random", "sweep", "magnitude")},
    ]
    if params["noise"] == "uniform":
        out.append({"output": "noise", "check": "within", "low": 0.0, "high": 1.0})
    return out


def reference(params, weights, inputs):
    """With the noise as an input the sample is arithmetic: mean + std * noise, in float64.
    The seeded variants draw inside the cell: nothing to compute here."""
    if params["noise"] != "input":
        return {}
    mean, std, noise = [np.asarray(x, dtype=np.float64) for x in inputs]
    return {"sample": mean + std * noise, "noise": noise * 1.0}


def make_weights(params):
    """No weights: the distribution's parameters are inputs."""
    return {}


def make_inputs(params):
    """Per-row means and standard deviations of a policy's output (and, for ``reparam``,
    standard normal noise), from the seed."""
    if params["noise"] not in NOISE:
        raise ValueError(
            "action_sampler: noise must be one of %s, not %r" % (", ".join(NOISE), params["noise"])
        )
    rng = np.random.RandomState(int(params["seed"]) + 2)
    dtype = np.dtype(params["dtype"])
    shape = (int(params["batch"]), int(params["act_dim"]))
    mean = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    std = np.exp(rng.uniform(-2.0, 0.5, size=shape)).astype(dtype)
    inputs = [mean, std]
    if params["noise"] == "input":
        inputs.append(rng.standard_normal(shape).astype(dtype))
    return inputs


def comparator_options(params):
    # The uniform variant draws from U[0, 1): its KS test is on the same output.
    return {"ks_two_sample": {"output": "noise"}}


def build_cell(params, weights):
    """Runs in a worker: the sampling cell."""
    from mindspore import nn, ops

    shape = (int(params["batch"]), int(params["act_dim"]))
    seed = int(params["seed"])
    kind = params["noise"]

    class Reparam(nn.Cell):
        def construct(self, mean, std, noise):
            return mean + std * noise, noise * 1

    class Seeded(nn.Cell):
        def __init__(self):
            super(Seeded, self).__init__()
            if kind == "normal":
                self.draw = ops.StandardNormal(seed=seed + 1, seed2=seed + 2)
            else:
                self.draw = ops.UniformReal(seed=seed + 1, seed2=seed + 2)
            self.cast = ops.Cast()

        def construct(self, mean, std):
            noise = self.cast(self.draw(shape), mean.dtype)
            return mean + std * noise, noise

    return Reparam() if kind == "input" else Seeded()
