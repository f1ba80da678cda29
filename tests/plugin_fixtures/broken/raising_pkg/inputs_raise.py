"""A probe whose inputs cannot be made: make_inputs raises in the auditor."""

NAME = "inputs_raise"
VERSION = "1"
INPUTS = ("x",)
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"batch": 4}


def make_weights(params):
    return {}


def make_inputs(params):
    raise KeyError("observation_space")


def build_cell(params, weights):
    raise AssertionError("never reached: the inputs come first")
