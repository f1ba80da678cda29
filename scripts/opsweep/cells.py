"""The operator sweep's cells: one minimal ``nn.Cell`` per case of ``opsweep.catalog`` (same
names), built inside a training stack's worker through the probe API (``build_cell``).

Runs inside MindSpore 2.0 (Python 3.7, numpy 1.21) and 2.10 (Python 3.11): no walrus, no
``list[int]``. Imports MindSpore at module level because MindSpore's graph compiler parses each
cell's ``construct`` from this file's source (cells must be module-level classes). A missing
API in one MindSpore release raises AttributeError/TypeError at build: "not expressible" there.
"""

from collections import OrderedDict

import mindspore.nn as nn
import mindspore.ops as ops
import numpy as np
from mindspore import Parameter, Tensor
from mindspore import dtype as mstype

P = ops  # primitives (ops.MatMul, ...) are exported under mindspore.ops in 2.0 and 2.10


# ---------------------------------------------------------------- generic cells
class Call1(nn.Cell):
    """op(x)"""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return self.op(x)


class Call1c(nn.Cell):
    """op(x, c) with a constant c (axis, shape, multiples, ...)."""

    def __init__(self, op, c):
        super().__init__()
        self.op = op
        self.c = c

    def construct(self, x):
        return self.op(x, self.c)


class Call1cc(nn.Cell):
    def __init__(self, op, c1, c2):
        super().__init__()
        self.op = op
        self.c1 = c1
        self.c2 = c2

    def construct(self, x):
        return self.op(x, self.c1, self.c2)


class Call2(nn.Cell):
    """op(x, y)"""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, y):
        return self.op(x, y)


class CallTuple2(nn.Cell):
    """op((x, y)) -- Concat, Stack."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, y):
        return self.op((x, y))


class WithWeight(nn.Cell):
    """op(x, w) with a Parameter w of the given shape (MatMul, BiasAdd, PReLU, ...)."""

    def __init__(self, op, shape):
        super().__init__()
        self.op = op
        self.w = Parameter(Tensor(np.zeros(shape, np.float32)), name="w")

    def construct(self, x):
        return self.op(x, self.w)


class RandomPlusInput(nn.Cell):
    """op(shape) + x: a random source with a fixed shape; x keeps the graph's input alive."""

    def __init__(self, op, shape):
        super().__init__()
        self.op = op
        self.shape = shape

    def construct(self, x):
        return self.op(self.shape) + x


# ---------------------------------------------------------------- specific cells
class CastRoundTrip(nn.Cell):
    def __init__(self):
        super().__init__()
        self.cast = P.Cast()

    def construct(self, x):
        return self.cast(self.cast(x, mstype.float16), mstype.float32)


class Gather(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Gather()

    def construct(self, x, idx):
        return self.op(x, idx, 0)


class GatherD(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.GatherD()

    def construct(self, x, idx):
        return self.op(x, 1, idx)


class OneHot(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.OneHot(axis=-1)
        self.on = Tensor(1.0, mstype.float32)
        self.off = Tensor(0.0, mstype.float32)

    def construct(self, idx):
        return self.op(idx, 6, self.on, self.off)


class SelectGreater(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gt = P.Greater()
        self.select = P.Select()

    def construct(self, x, y):
        return self.select(self.gt(x, y), x, y)


class LogicalAnd(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.gt = P.Greater()
        self.lt = P.Less()
        self.op = op

    def construct(self, x, y):
        return self.op(self.gt(x, y), self.lt(x, 0.5 * y))


class LogicalNot(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gt = P.Greater()
        self.op = P.LogicalNot()

    def construct(self, x, y):
        return self.op(self.gt(x, y))


class MaskedFill(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gt = P.Greater()
        self.op = P.MaskedFill()
        self.value = Tensor(-1.0e9, mstype.float32)

    def construct(self, x, y):
        return self.op(x, self.gt(x, y), self.value)


class Split2(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Split(axis=1, output_num=2)

    def construct(self, x):
        a, b = self.op(x)
        return a, b


class StridedSlice(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.StridedSlice()

    def construct(self, x):
        return self.op(x, (0, 0), (4, 8), (1, 2))


class ClipByValue(nn.Cell):
    def construct(self, x):
        return ops.clip_by_value(x, -0.5, 0.5)


class ClampFn(nn.Cell):
    def construct(self, x):
        return ops.clamp(x, -0.5, 0.5)


class ScatterNd(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.ScatterNd()
        self.indices = Tensor(np.array([[0], [2], [3]], np.int32))

    def construct(self, updates):
        return self.op(self.indices, updates, (6, 8))


class Multinomial(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Multinomial(seed=1, seed2=2)

    def construct(self, probs):
        return self.op(probs, 3)


class RandomCategorical(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.RandomCategorical(mstype.int32)

    def construct(self, logits):
        return self.op(logits, 3, 7)


class UniformInt(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.UniformInt(seed=1, seed2=2)
        self.low = Tensor(0, mstype.int32)
        self.high = Tensor(10, mstype.int32)

    def construct(self, x):
        return self.op((4, 8), self.low, self.high) + x


class DropoutPrim(nn.Cell):
    """The Dropout primitive as it stays in a graph exported in training mode."""

    def __init__(self):
        super().__init__()
        self.op = P.Dropout(keep_prob=0.9, Seed0=1, Seed1=2)

    def construct(self, x):
        out, _ = self.op(x)
        return out


def _dropout_eval():
    try:
        cell = nn.Dropout(p=0.1)
    except TypeError:
        cell = nn.Dropout(keep_prob=0.9)
    cell.set_train(False)
    return cell


class Recurrent(nn.Cell):
    """nn.GRU / nn.RNN, batch_first; returns the sequence output and the final state."""

    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(input_size=4, hidden_size=8, num_layers=1, batch_first=True)

    def construct(self, x):
        out, state = self.rnn(x)
        return out, state


class LSTMFlat(nn.Cell):
    """nn.LSTM, batch_first; the sequence output and the final (h, c), as three flat outputs
    (a stack worker runs cells whose outputs are tensors or a flat tuple of them)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=4, hidden_size=8, num_layers=1, batch_first=True)

    def construct(self, x):
        out, state = self.rnn(x)
        h, c = state
        return out, h, c


class DenseTanh(nn.Cell):
    """The RL policy layer itself: Dense + Tanh, as a sanity case."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(8, 4)
        self.act = nn.Tanh()

    def construct(self, x):
        return self.act(self.fc(x))


class Einsum(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Einsum("ij,jk->ik")

    def construct(self, x, y):
        return self.op((x, y))


class Lerp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Lerp()

    def construct(self, x, y):
        return self.op(x, y, 0.3)


def _bn1d():
    cell = nn.BatchNorm1d(8)
    cell.set_train(False)
    return cell


def _bn2d():
    cell = nn.BatchNorm2d(3)
    cell.set_train(False)
    return cell


# ---------------------------------------------------------------- second-round cells
# The first sweep showed Lite 2.0 failures that come from the graph's shape rather than from
# a missing kernel (a tuple-valued node as the graph output, an identity graph, a random
# draw that is both an output and an input of another node). These cases separate the two.
class Unpacked2(nn.Cell):
    """a, b = op(x[, c]); return a, b -- the tuple is unpacked (TupleGetItem) before output."""

    def __init__(self, op, c=None):
        super().__init__()
        self.op = op
        self.c = c
        self.has_c = c is not None

    def construct(self, x):
        if self.has_c:
            a, b = self.op(x, self.c)
        else:
            a, b = self.op(x)
        return a, b


class UnstackUnpacked(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = P.Unstack(axis=0)

    def construct(self, x):
        a, b, c, d = self.op(x)
        return a + b, c - d


class CastAdd(nn.Cell):
    """y + fp32(fp16(x)): the fp16 round trip in the middle of the graph."""

    def __init__(self):
        super().__init__()
        self.cast = P.Cast()

    def construct(self, x, y):
        return y + self.cast(self.cast(x, mstype.float16), mstype.float32)


class CastFp16Add(nn.Cell):
    """fp32(fp16(x) + fp16(y)): arithmetic in fp16."""

    def __init__(self):
        super().__init__()
        self.cast = P.Cast()

    def construct(self, x, y):
        s = self.cast(x, mstype.float16) + self.cast(y, mstype.float16)
        return self.cast(s, mstype.float32)


class ThenMul(nn.Cell):
    """cell(x) * y: keeps an op that folds to identity from making an identity graph."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def construct(self, x, y):
        return self.cell(x) * y


class RandomTwoOutputs(nn.Cell):
    """n = op(shape); return n + x, n -- the draw is an output and feeds another node
    (the action_sampler probe's shape: sample and noise)."""

    def __init__(self, op, shape):
        super().__init__()
        self.op = op
        self.shape = shape

    def construct(self, x):
        n = self.op(self.shape)
        return n + x, n


class TanhTwoOutputs(nn.Cell):
    """The same graph shape with a deterministic op (control for RandomTwoOutputs)."""

    def __init__(self):
        super().__init__()
        self.op = P.Tanh()

    def construct(self, x, y):
        t = self.op(x)
        return t + y, t


BUILDS = OrderedDict()


def _add(name, build):
    BUILDS[name] = build


# Linear algebra
_add("Dense", lambda: nn.Dense(8, 4))
_add("DenseTanh", DenseTanh)
_add("MatMul", lambda: WithWeight(P.MatMul(), (8, 3)))
_add("MatMulTransposeB", lambda: WithWeight(P.MatMul(transpose_b=True), (3, 8)))
_add("BatchMatMul", lambda: Call2(P.BatchMatMul()))
_add("BiasAdd", lambda: WithWeight(P.BiasAdd(), (8,)))
_add("Einsum", Einsum)
# Elementwise arithmetic
_add("Add", lambda: Call2(P.Add()))
_add("Sub", lambda: Call2(P.Sub()))
_add("Mul", lambda: Call2(P.Mul()))
_add("Div", lambda: Call2(P.Div()))
_add("RealDiv", lambda: Call2(P.RealDiv()))
_add("FloorDiv", lambda: Call2(P.FloorDiv()))
_add("FloorMod", lambda: Call2(P.FloorMod()))
_add("SquaredDifference", lambda: Call2(P.SquaredDifference()))
_add("Maximum", lambda: Call2(P.Maximum()))
_add("Minimum", lambda: Call2(P.Minimum()))
_add("Pow", lambda: Call2(P.Pow()))
_add("Atan2", lambda: Call2(P.Atan2()))
_add("Lerp", Lerp)
_add("Neg", lambda: Call1(P.Neg()))
_add("Abs", lambda: Call1(P.Abs()))
_add("Square", lambda: Call1(P.Square()))
_add("Sqrt", lambda: Call1(P.Sqrt()))
_add("Rsqrt", lambda: Call1(P.Rsqrt()))
_add("Reciprocal", lambda: Call1(P.Reciprocal()))
_add("Exp", lambda: Call1(P.Exp()))
_add("Expm1", lambda: Call1(P.Expm1()))
_add("Log", lambda: Call1(P.Log()))
_add("Log1p", lambda: Call1(P.Log1p()))
_add("Sin", lambda: Call1(P.Sin()))
_add("Cos", lambda: Call1(P.Cos()))
_add("Erf", lambda: Call1(P.Erf()))
_add("Erfinv", lambda: Call1(P.Erfinv()))
_add("Floor", lambda: Call1(P.Floor()))
_add("Ceil", lambda: Call1(P.Ceil()))
_add("Round", lambda: Call1(P.Round()))
_add("Sign", lambda: Call1(P.Sign()))
_add("ClipByValue", ClipByValue)
_add("Clamp", ClampFn)
_add("IsNan", lambda: Call1(P.IsNan()))
_add("IsFinite", lambda: Call1(P.IsFinite()))
_add("ZerosLike", lambda: Call1(P.ZerosLike()))
_add("OnesLike", lambda: Call1(P.OnesLike()))
# Activations
_add("Tanh", lambda: Call1(P.Tanh()))
_add("Sigmoid", lambda: Call1(P.Sigmoid()))
_add("ReLU", lambda: Call1(P.ReLU()))
_add("ReLU6", lambda: Call1(P.ReLU6()))
_add("LeakyReLU", lambda: nn.LeakyReLU(0.2))
_add("Elu", lambda: Call1(P.Elu()))
_add("GeLU", lambda: Call1(P.GeLU()))
_add("FastGeLU", lambda: Call1(P.FastGeLU()))
_add("SiLU", lambda: nn.SiLU())
_add("HSwish", lambda: Call1(P.HSwish()))
_add("HSigmoid", lambda: Call1(P.HSigmoid()))
_add("Softplus", lambda: Call1(P.Softplus()))
_add("Softsign", lambda: Call1(P.Softsign()))
_add("Mish", lambda: Call1(P.Mish()))
_add("SeLU", lambda: Call1(P.SeLU()))
_add("CeLU", lambda: Call1(P.CeLU(alpha=1.0)))
_add("PReLU", lambda: nn.PReLU(channel=8))
_add("Softmax", lambda: Call1(P.Softmax(axis=-1)))
_add("LogSoftmax", lambda: Call1(P.LogSoftmax(axis=-1)))
_add("L2Normalize", lambda: Call1(P.L2Normalize(axis=-1)))
# Reductions, index and sort
_add("ReduceSum", lambda: Call1c(P.ReduceSum(keep_dims=False), 1))
_add("ReduceMean", lambda: Call1c(P.ReduceMean(keep_dims=True), 1))
_add("ReduceMax", lambda: Call1c(P.ReduceMax(keep_dims=False), 1))
_add("ReduceMin", lambda: Call1c(P.ReduceMin(keep_dims=False), 1))
_add("ReduceProd", lambda: Call1c(P.ReduceProd(keep_dims=False), 1))
_add("Argmax", lambda: Call1(P.Argmax(axis=-1, output_type=mstype.int32)))
_add("Argmin", lambda: Call1(P.Argmin(axis=-1)))
_add("ArgMaxWithValue", lambda: Call1(P.ArgMaxWithValue(axis=-1)))
_add("ArgMinWithValue", lambda: Call1(P.ArgMinWithValue(axis=-1)))
_add("CumSum", lambda: Call1c(P.CumSum(), 1))
_add("CumProd", lambda: Call1c(P.CumProd(), 1))
_add("TopK", lambda: Call1c(P.TopK(sorted=True), 3))
_add("Sort", lambda: Call1(P.Sort(axis=-1)))
# Shape and data movement
_add("Cast", CastRoundTrip)
_add("Concat", lambda: CallTuple2(P.Concat(axis=1)))
_add("Stack", lambda: CallTuple2(P.Stack(axis=0)))
_add("Split", Split2)
_add("Unstack", lambda: Call1(P.Unstack(axis=0)))
_add("Reshape", lambda: Call1c(P.Reshape(), (2, 16)))
_add("Transpose", lambda: Call1c(P.Transpose(), (1, 0)))
_add("ExpandDims", lambda: Call1c(P.ExpandDims(), 1))
_add("Squeeze", lambda: Call1(P.Squeeze(axis=1)))
_add("Flatten", lambda: nn.Flatten())
_add("Tile", lambda: Call1c(P.Tile(), (2, 1)))
_add("BroadcastTo", lambda: Call1(P.BroadcastTo((4, 8))))
_add("Slice", lambda: Call1cc(P.Slice(), (0, 1), (2, 3)))
_add("StridedSlice", StridedSlice)
_add("Pad", lambda: Call1(P.Pad(((0, 0), (1, 2)))))
_add("Gather", Gather)
_add("GatherD", GatherD)
_add("GatherNd", lambda: Call2(P.GatherNd()))
_add("ScatterNd", ScatterNd)
_add("Embedding", lambda: nn.Embedding(10, 4))
_add("OneHot", OneHot)
_add("ResizeNearestNeighbor", lambda: Call1(P.ResizeNearestNeighbor((16, 16))))
# Comparison and selection
_add("Equal", lambda: Call2(P.Equal()))
_add("NotEqual", lambda: Call2(P.NotEqual()))
_add("Less", lambda: Call2(P.Less()))
_add("LessEqual", lambda: Call2(P.LessEqual()))
_add("Greater", lambda: Call2(P.Greater()))
_add("GreaterEqual", lambda: Call2(P.GreaterEqual()))
_add("LogicalAnd", lambda: LogicalAnd(P.LogicalAnd()))
_add("LogicalOr", lambda: LogicalAnd(P.LogicalOr()))
_add("LogicalNot", LogicalNot)
_add("Select", SelectGreater)
_add("MaskedFill", MaskedFill)
# Normalisation, convolution, pooling
_add("LayerNorm", lambda: nn.LayerNorm((8,), begin_norm_axis=-1, begin_params_axis=-1))
_add("BatchNorm1d", _bn1d)
_add("BatchNorm2d", _bn2d)
_add("Conv1d", lambda: nn.Conv1d(4, 6, 3, pad_mode="valid", has_bias=True))
_add("Conv2d", lambda: nn.Conv2d(3, 4, 3, pad_mode="valid", has_bias=True))
_add("Conv2dSame", lambda: nn.Conv2d(3, 4, 3, pad_mode="same", has_bias=False))
_add("MaxPool", lambda: nn.MaxPool2d(kernel_size=2, stride=2))
_add("AvgPool", lambda: nn.AvgPool2d(kernel_size=2, stride=2))
# Recurrent
_add("LSTM", LSTMFlat)
_add("GRU", lambda: Recurrent("GRU"))
_add("RNN", lambda: Recurrent("RNN"))
# Random and dropout
_add("StandardNormal", lambda: RandomPlusInput(P.StandardNormal(seed=1, seed2=2), (4, 8)))
_add("UniformReal", lambda: RandomPlusInput(P.UniformReal(seed=1, seed2=2), (4, 8)))
_add("UniformInt", UniformInt)
_add("Multinomial", Multinomial)
_add("RandomCategorical", RandomCategorical)
_add("DropoutEval", _dropout_eval)
_add("DropoutPrim", DropoutPrim)
# Second round (see the cells above)
_add("ArgMaxWithValueUnpacked", lambda: Unpacked2(P.ArgMaxWithValue(axis=-1)))
_add("ArgMinWithValueUnpacked", lambda: Unpacked2(P.ArgMinWithValue(axis=-1)))
_add("TopKUnpacked", lambda: Unpacked2(P.TopK(sorted=True), 3))
_add("SortUnpacked", lambda: Unpacked2(P.Sort(axis=-1)))
_add("UnstackUnpacked", UnstackUnpacked)
_add("CastAdd", CastAdd)
_add("CastFp16Add", CastFp16Add)
_add("DropoutEvalMul", lambda: ThenMul(_dropout_eval()))
_add("DropoutPrimMul", lambda: ThenMul(DropoutPrim()))
_add("UniformRealTwoOutputs", lambda: RandomTwoOutputs(P.UniformReal(seed=1, seed2=2), (4, 8)))
_add("StandardNormalTwoOutputs", lambda: RandomTwoOutputs(P.StandardNormal(seed=1, seed2=2), (4, 8)))
_add("TanhTwoOutputs", TanhTwoOutputs)


def seed_parameters(cell, seed):
    """Replace every parameter by seeded numbers (variances and scales positive): the weights
    come from a seed, never from the framework's initializer."""
    params = sorted(cell.parameters_and_names(), key=lambda kv: kv[0])
    for i, (name, p) in enumerate(params):
        rng = np.random.RandomState(seed * 7919 + i)
        shape = tuple(p.shape)
        lower = name.lower()
        if "variance" in lower or "gamma" in lower:
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.uniform(-0.5, 0.5, shape)
        p.set_data(Tensor(np.asarray(value).astype(p.asnumpy().dtype)))


def build_cell(params, weights):
    """The probe API of a stack worker's ``build`` request: ``params`` = {"case", "seed"}."""
    cell = BUILDS[params["case"]]()
    cell.set_train(False)
    seed_parameters(cell, int(params.get("seed", 0)))
    return cell
