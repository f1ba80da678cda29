"""A probe whose model cannot be built: build_cell raises inside the worker."""

import numpy as np

NAME = "build_raises"
VERSION = "1"
INPUTS = ("x",)
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"batch": 4}


def make_weights(params):
    return {}


def make_inputs(params):
    return [np.zeros((params["batch"], 3), np.float32)]


def build_cell(params, weights):
    raise RuntimeError("this policy cannot be built (plugin bug)")
