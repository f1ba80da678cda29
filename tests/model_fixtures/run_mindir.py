"""What a serving runtime really does with a MindIR, outside the auditor: load it the way a
serving system does (MindSpore Lite ``Model.build_from_file``, or ``nn.GraphCell(mindspore.load)``
in graph mode) and run one batch, in this process.

    python run_mindir.py lite|graph FILE.mindir INPUTS.npz RESULT.json

RESULT.json: {"phase": "load"|"run"|"done", "error": "...", "outputs": [[shape, dtype, finite]]},
written after each phase (a crash or hang still says where it was). The outputs go to
RESULT.json's name with .npz. Runs inside a stack (Python 3.7 or 3.11).
"""

import json
import os
import sys
import traceback

import numpy as np


def write(path, result):
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def main():
    kind, model, inputs_path, result_path = sys.argv[1:5]
    with np.load(inputs_path) as z:
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
    np.savez(result_path[: -len(".json")] + ".npz", *outputs)
    result["outputs"] = [[list(o.shape), str(o.dtype), bool(np.isfinite(o).all())] for o in outputs]
    result["phase"] = "done"
    write(result_path, result)
    sys.stdout.flush()
    os._exit(0)  # Lite 2.0 can crash while freeing a model at exit; the result is written


if __name__ == "__main__":
    main()
