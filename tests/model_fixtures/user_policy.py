"""A user's own policy, not one of the built-in probes: observation of 11 values, a Dense +
LayerNorm trunk, and two heads (discrete action logits and a tanh-squashed continuous mean).
Built from seeded numpy weights and exported to MindIR by whatever MindSpore runs this script.

    python user_policy.py OUT.mindir [--seed N] [--noise] [--batch B] [--fp16]

``--noise`` adds a StandardNormal draw to the continuous head (an operator MindSpore Lite 2.0
has no CPU kernel for). ``--fp16`` exports the same policy computing in float16 with a float16
input (the fp32 -> fp16 replacement the deployed-model watch must call another graph). Runs
inside a stack (Python 3.7, numpy, MindSpore).
"""

import argparse
import os

import numpy as np

OBS, HIDDEN, DISCRETE, CONTINUOUS = 11, 32, 4, 2


def weights(seed):
    rng = np.random.RandomState(seed)

    def dense(n_in, n_out):
        w = rng.normal(0.0, 1.0 / np.sqrt(n_in), size=(n_out, n_in)).astype(np.float32)
        return w, rng.normal(0.0, 0.1, size=(n_out,)).astype(np.float32)

    return {
        "trunk": dense(OBS, HIDDEN),
        "gamma": (1.0 + rng.normal(0.0, 0.1, size=(HIDDEN,))).astype(np.float32),
        "beta": rng.normal(0.0, 0.1, size=(HIDDEN,)).astype(np.float32),
        "logits": dense(HIDDEN, DISCRETE),
        "mean": dense(HIDDEN, CONTINUOUS),
    }


def build(seed, noise):
    import mindspore as ms
    from mindspore import nn, ops

    w = weights(seed)

    def dense(name, n_in, n_out):
        wt, b = w[name]
        return nn.Dense(n_in, n_out, weight_init=ms.Tensor(wt), bias_init=ms.Tensor(b))

    class Policy(nn.Cell):
        def __init__(self):
            super().__init__()
            self.trunk = dense("trunk", OBS, HIDDEN)
            self.norm = nn.LayerNorm(
                (HIDDEN,),
                begin_norm_axis=-1,
                begin_params_axis=-1,
                gamma_init=ms.Tensor(w["gamma"]),
                beta_init=ms.Tensor(w["beta"]),
            )
            self.act = nn.ReLU()
            self.logits = dense("logits", HIDDEN, DISCRETE)
            self.mean = dense("mean", HIDDEN, CONTINUOUS)
            self.tanh = nn.Tanh()
            self.noise = ops.StandardNormal(seed=1, seed2=2) if noise else None

        def construct(self, obs):
            h = self.act(self.norm(self.trunk(obs)))
            mean = self.tanh(self.mean(h))
            if self.noise is not None:
                mean = mean + 0.1 * self.noise(ops.shape(mean))
            return self.logits(h), mean

    return Policy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", action="store_true")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    import mindspore as ms

    cell = build(args.seed, args.noise)
    dtype = np.float16 if args.fp16 else np.float32
    if args.fp16:
        cell.to_float(ms.float16)
    example = ms.Tensor(np.zeros((args.batch, OBS), dtype))
    base = args.out[: -len(".mindir")] if args.out.endswith(".mindir") else args.out
    ms.export(cell, example, file_name=base, file_format="MINDIR")
    os.chmod(base + ".mindir", 0o644)


if __name__ == "__main__":
    main()
