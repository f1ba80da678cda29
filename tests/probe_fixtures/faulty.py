"""A probe whose build misbehaves inside the train worker, as a broken runtime would.

params["mode"]: "crash" (the process is killed by SIGKILL mid-request), "hang" (never
answers), "stop" (the worker stops itself with SIGSTOP), "wait" (writes its pid to
the file $FAULTY_MARKER, then never answers: a test acts on it meanwhile), "raise" (a
Python exception), anything else builds a small working cell. $FAULTY_MODE, set in a
stack's env, overrides params["mode"] (two stacks, two behaviours, one probe config).
Python 3.7 compatible: it runs inside the stacks.
"""

import os
import signal
import time

import numpy as np

NAME = "faulty"
VERSION = "1"
INPUTS = ("x",)
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"mode": "crash", "batch": 4, "dtype": "float32"}


def make_weights(params):
    return {"w": np.full((3,), 2.0, dtype=np.float32)}


def make_inputs(params):
    return [np.arange(int(params["batch"]) * 3, dtype=np.float32).reshape(-1, 3)]


def build_cell(params, weights):
    mode = os.environ.get("FAULTY_MODE") or params["mode"]
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif mode == "wait":
        marker = os.environ["FAULTY_MARKER"]
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(3600)
    elif mode == "raise":
        raise ValueError("faulty probe refuses to build")
    import mindspore
    from mindspore import nn

    class Scale(nn.Cell):
        def __init__(self):
            super(Scale, self).__init__()
            self.w = mindspore.Parameter(mindspore.Tensor(weights["w"]), name="w")

        def construct(self, x):
            return x * self.w

    return Scale()
