"""Train (seed the weights of) and export the user policies of ``mypolicy.nets`` with whatever
MindSpore runs this script: per kind, ``OUT/KIND.mindir`` and its checkpoint ``OUT/KIND.ckpt``.

    python export.py OUT [--kinds a,b] [--seed N] [--batch B]

Runs inside a stack (Python 3.7, numpy, MindSpore); finds ``mypolicy`` next to itself.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kinds", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    import mindspore as ms

    from mypolicy import nets

    ms.set_context(mode=ms.PYNATIVE_MODE)
    kinds = [k for k in args.kinds.split(",") if k] or list(nets.KINDS)
    for kind in kinds:
        example = [ms.Tensor(np.zeros((args.batch, nets.OBS_OF.get(kind, nets.OBS)), np.float32))]
        if kind in nets.ACTIONS_OF:
            example.append(ms.Tensor(np.zeros((args.batch, nets.ACTIONS_OF[kind]), np.float32)))
        cell = nets.train(nets.build_actor(kind), args.seed)
        base = os.path.join(args.out, kind)
        ms.save_checkpoint(cell, base + ".ckpt")
        ms.export(cell, *example, file_name=base, file_format="MINDIR")
        os.chmod(base + ".mindir", 0o644)


if __name__ == "__main__":
    main()
