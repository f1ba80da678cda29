"""The operator sweep's cases: one minimal graph per operator primitive the training stacks can
export, with the inputs it needs. Numpy only: the driver (auditor side) makes the inputs, the
training stack's worker builds the cell (``opsweep.cells``, same names).

A case's ``inputs`` are ``(shape, kind)``: normal, wide (-8..8), positive (0.1..3), unit
(-0.9..0.9), nonzero (|x| >= 0.5), prob (rows sum to 1), int:<low>:<high> (int32).
``random``: the output comes from a random generator; only shape, dtype and finiteness are
compared. Runs on Python 3.7 (the workers of MindSpore 2.0 and Lite 2.0 register it too).
"""

from collections import OrderedDict

import numpy as np


class Case:
    def __init__(self, name, inputs, expect="", random=False):
        self.name = name
        self.inputs = inputs
        self.expect = expect or name
        self.random = random


CASES = OrderedDict()

# One case per failure form measured on the reference stacks (shared notes: opsweep), and the
# policy layer itself as the baseline: what CI sweeps afresh against the shipped tables.
CI_CASES = (
    "Dense",
    "DenseTanh",
    "SiLU",
    "StandardNormal",
    "ReduceMean",
    "Cast",
    "LayerNorm",
    "ArgMinWithValueUnpacked",
    "UniformRealTwoOutputs",
)


def _case(name, inputs, expect="", random=False):
    CASES[name] = Case(name, inputs, expect, random)


X = ((4, 8), "normal")
Y = ((4, 8), "normal")
POS = ((4, 8), "positive")
NZ = ((4, 8), "nonzero")
IMG = ((1, 3, 8, 8), "normal")

# Linear algebra
_case("Dense", [X], "MatMul BiasAdd")
_case("DenseTanh", [X], "MatMul BiasAdd Tanh")
_case("MatMul", [X])
_case("MatMulTransposeB", [X], "MatMul")
_case("BatchMatMul", [((2, 4, 8), "normal"), ((2, 8, 3), "normal")])
_case("BiasAdd", [X])
_case("Einsum", [((4, 8), "normal"), ((8, 3), "normal")])
# Elementwise arithmetic
_case("Add", [X, Y])
_case("Sub", [X, Y])
_case("Mul", [X, Y])
_case("Div", [X, NZ])
_case("RealDiv", [X, NZ])
_case("FloorDiv", [X, NZ])
_case("FloorMod", [X, NZ])
_case("SquaredDifference", [X, Y])
_case("Maximum", [X, Y])
_case("Minimum", [X, Y])
_case("Pow", [POS, Y])
_case("Atan2", [X, Y])
_case("Lerp", [X, Y])
_case("Neg", [X])
_case("Abs", [X])
_case("Square", [X])
_case("Sqrt", [POS])
_case("Rsqrt", [POS])
_case("Reciprocal", [NZ])
_case("Exp", [X])
_case("Expm1", [X])
_case("Log", [POS])
_case("Log1p", [POS])
_case("Sin", [X])
_case("Cos", [X])
_case("Erf", [X])
_case("Erfinv", [((4, 8), "unit")])
_case("Floor", [X])
_case("Ceil", [X])
_case("Round", [X])
_case("Sign", [X])
_case("ClipByValue", [X], "clip_by_value")
_case("Clamp", [X], "clamp")
_case("IsNan", [X])
_case("IsFinite", [X])
_case("ZerosLike", [X])
_case("OnesLike", [X])
# Activations
_case("Tanh", [X])
_case("Sigmoid", [X])
_case("ReLU", [X])
_case("ReLU6", [((4, 8), "wide")])
_case("LeakyReLU", [X], "nn.LeakyReLU")
_case("Elu", [X])
_case("GeLU", [X])
_case("FastGeLU", [X])
_case("SiLU", [X], "nn.SiLU")
_case("HSwish", [((4, 8), "wide")])
_case("HSigmoid", [((4, 8), "wide")])
_case("Softplus", [X])
_case("Softsign", [X])
_case("Mish", [X])
_case("SeLU", [X])
_case("CeLU", [X])
_case("PReLU", [X], "PReLU")
_case("Softmax", [X])
_case("LogSoftmax", [X])
_case("L2Normalize", [X])
# Reductions, index and sort
_case("ReduceSum", [X])
_case("ReduceMean", [X])
_case("ReduceMax", [X])
_case("ReduceMin", [X])
_case("ReduceProd", [X])
_case("Argmax", [X])
_case("Argmin", [X])
_case("ArgMaxWithValue", [X])
_case("ArgMinWithValue", [X])
_case("CumSum", [X])
_case("CumProd", [X])
_case("TopK", [X])
_case("Sort", [X])
# Shape and data movement
_case("Cast", [X], "Cast (fp32->fp16->fp32)")
_case("Concat", [X, Y])
_case("Stack", [X, Y])
_case("Split", [X])
_case("Unstack", [X])
_case("Reshape", [X])
_case("Transpose", [X])
_case("ExpandDims", [X])
_case("Squeeze", [((4, 1, 8), "normal")])
_case("Flatten", [((2, 3, 4), "normal")], "Flatten")
_case("Tile", [X])
_case("BroadcastTo", [((1, 8), "normal")])
_case("Slice", [X])
_case("StridedSlice", [X])
_case("Pad", [X])
_case("Gather", [((10, 4), "normal"), ((5,), "int:0:10")])
_case("GatherD", [X, ((4, 3), "int:0:8")])
_case("GatherNd", [X, ((3, 2), "int:0:4")])
_case("ScatterNd", [((3, 8), "normal")])
_case("Embedding", [((2, 5), "int:0:10")], "Gather")
_case("OneHot", [((5,), "int:0:6")])
_case("ResizeNearestNeighbor", [IMG])
# Comparison and selection
_case("Equal", [((4, 8), "int:0:3"), ((4, 8), "int:0:3")])
_case("NotEqual", [((4, 8), "int:0:3"), ((4, 8), "int:0:3")])
_case("Less", [X, Y])
_case("LessEqual", [X, Y])
_case("Greater", [X, Y])
_case("GreaterEqual", [X, Y])
_case("LogicalAnd", [X, Y], "LogicalAnd Greater Less")
_case("LogicalOr", [X, Y], "LogicalOr Greater Less")
_case("LogicalNot", [X, Y], "LogicalNot Greater")
_case("Select", [X, Y], "Select Greater")
_case("MaskedFill", [X, Y], "MaskedFill Greater")
# Normalisation, convolution, pooling
_case("LayerNorm", [X])
_case("BatchNorm1d", [X], "BatchNorm (inference)")
_case("BatchNorm2d", [IMG], "BatchNorm (inference)")
_case("Conv1d", [((2, 4, 10), "normal")])
_case("Conv2d", [IMG])
_case("Conv2dSame", [IMG], "Conv2D")
_case("MaxPool", [IMG])
_case("AvgPool", [IMG])
# Recurrent
_case("LSTM", [((2, 5, 4), "normal")])
_case("GRU", [((2, 5, 4), "normal")])
_case("RNN", [((2, 5, 4), "normal")])
# Random and dropout
_case("StandardNormal", [X], random=True)
_case("UniformReal", [X], random=True)
_case("UniformInt", [((4, 8), "int:0:3")], random=True)
_case("Multinomial", [((4, 5), "prob")], random=True)
_case("RandomCategorical", [((4, 5), "normal")], random=True)
_case("DropoutEval", [X], "nn.Dropout in eval mode (expected: no node)")
_case("DropoutPrim", [X], "Dropout", random=True)
# Second round (see the cells above)
_case("ArgMaxWithValueUnpacked", [X], "ArgMaxWithValue")
_case("ArgMinWithValueUnpacked", [X], "ArgMinWithValue")
_case("TopKUnpacked", [X], "TopK")
_case("SortUnpacked", [X], "Sort")
_case("UnstackUnpacked", [X], "Unstack")
_case("CastAdd", [X, Y], "Cast (fp32->fp16->fp32) inside the graph")
_case("CastFp16Add", [X, Y], "Cast, Add in fp16")
_case("DropoutEvalMul", [X, Y], "nn.Dropout (eval) then Mul")
_case("DropoutPrimMul", [X, Y], "Dropout primitive then Mul", random=True)
_case("UniformRealTwoOutputs", [X], "UniformReal as output and operand", random=True)
_case("StandardNormalTwoOutputs", [X], "StandardNormal as output and operand", random=True)
_case("TanhTwoOutputs", [X, Y], "Tanh as output and operand (control)")


def make_inputs(case, seed):
    """The case's inputs from ``seed`` (RandomState: the same numbers on numpy 1.21 and 2.x)."""
    out = []
    for i, (shape, kind) in enumerate(case.inputs):
        rng = np.random.RandomState(seed * 1000 + i)
        if kind == "normal":
            x = rng.standard_normal(shape)
        elif kind == "wide":
            x = rng.uniform(-8.0, 8.0, shape)
        elif kind == "positive":
            x = rng.uniform(0.1, 3.0, shape)
        elif kind == "unit":
            x = rng.uniform(-0.9, 0.9, shape)
        elif kind == "nonzero":
            x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        elif kind == "prob":
            x = rng.uniform(0.1, 1.0, shape)
            x = x / x.sum(axis=-1, keepdims=True)
        elif kind.startswith("int:"):
            _, low, high = kind.split(":")
            out.append(rng.randint(int(low), int(high), size=shape).astype(np.int32))
            continue
        else:
            raise ValueError("unknown input kind %r" % kind)
        out.append(np.asarray(x, np.float32))
    return out
