"""What a serving runtime really does with MindIR files, outside the auditor: load each the way
a serving system does (MindSpore Lite ``Model.build_from_file``, or
``nn.GraphCell(mindspore.load)`` in graph mode) and run one batch, in this process.

    python run_mindir.py lite|graph FILE.mindir... (each with FILE.inputs.npz next to it)

For each file, FILE.<tag>.json: {"phase": "load"|"run"|"done", "error": "...", "outputs":
[[shape, dtype, finite]]}, written after each phase (a crash or hang still says where it was),
where <tag> is the environment's RUN_MINDIR_TAG (default: the runtime kind). Every model is kept
alive until the process ends (Lite 2.0 cannot always rebuild a model after another was freed).
Runs inside a stack (Python 3.7 or 3.11).
"""

import json
import os
import sys
import traceback

import numpy as np

KEPT = []


def write(path, result):
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def run_one(kind, model, result_path):
    with np.load(model[: -len(".mindir")] + ".inputs.npz") as z:
        inputs = [z["arr_%d" % i] for i in range(len(z.files))]
    result = {"phase": "load"}
    write(result_path, result)
    try:
        if kind == "lite":
            import mindspore_lite as mslite

            ctx = mslite.Context()
            ctx.target = ["cpu"]
            net = mslite.Model()
            net.build_from_file(model, mslite.ModelType.MINDIR, ctx)
        else:
            import mindspore as ms

            ms.set_context(mode=ms.GRAPH_MODE)
            net = ms.nn.GraphCell(ms.load(model))
        KEPT.append(net)
        result["phase"] = "run"
        write(result_path, result)
        if kind == "lite":
            tensors = net.get_inputs()
            for t, x in zip(tensors, inputs):
                t.set_data_from_numpy(x)
            outputs = [np.array(o.get_data_to_numpy(), copy=True) for o in net.predict(tensors)]
        else:
            one = np.ones((1,), np.float32)
            for attempt in range(2):  # MindSpore 2.10 with numpy 2: the first arithmetic may fail once
                try:
                    (ms.Tensor(one) + ms.Tensor(one)).asnumpy()
                    break
                except SystemError:
                    if attempt:
                        raise
            got = net(*[ms.Tensor(x) for x in inputs])
            outputs = [o.asnumpy() for o in (got if isinstance(got, (tuple, list)) else [got])]
    except Exception as exc:  # what the runtime did is the result
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
        result["traceback"] = traceback.format_exc()[-2000:]
        write(result_path, result)
        return
    result["outputs"] = [[list(o.shape), str(o.dtype), bool(np.isfinite(o).all())] for o in outputs]
    result["phase"] = "done"
    write(result_path, result)


def main():
    kind, models = sys.argv[1], sys.argv[2:]
    tag = os.environ.get("RUN_MINDIR_TAG", kind)
    for model in models:
        run_one(kind, model, model[: -len(".mindir")] + "." + tag + ".json")
    sys.stdout.flush()
    os._exit(0)  # Lite 2.0 can crash while freeing a model at exit; the results are written


if __name__ == "__main__":
    main()
