"""The stack worker against the real runtimes: the protocol round trip, the runtime traps of
FACTS.md, and errors that carry the runtime's own words."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.config.load import parse
from auditor.extend.manager import Plugins, builtin_probes
from auditor.stacks.worker import WorkerError
from tests.configs import build

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def config(stacks, default_doc):
    return parse(default_doc, "test")


def worker(config, stack: str):
    """The stack's worker, reached as every command reaches it (not started)."""
    return Plugins(entry_points=False).reach(config).worker(stack)


@pytest.fixture(scope="module")
def exported(config, tmp_path_factory):
    """The PPO probe built on ms20 and ms210: reference outputs and MindIR files."""
    spec = builtin_probes()["ppo_policy"]
    params = spec.params({"batch": 8})
    out = {}
    tmp = tmp_path_factory.mktemp("mindir")
    for stack in ("ms20", "ms210"):
        with worker(config, stack) as w:
            w.start()
            w.request(
                "build",
                model="p",
                probe={"module": spec.module, "params": params},
                weights=spec.make_weights(params),
            )
            x = spec.make_inputs(params)
            ref = w.request("run", model="p", inputs=x).result["outputs"]
            data = w.request("export", model="p", inputs=x, path=str(w.workdir / "p.mindir")).result[
                "artifact"
            ]
            path = tmp / f"{stack}.mindir"
            path.write_bytes(data)
            out[stack] = (path, x, ref)
    return out


@pytest.mark.parametrize("stack", ["ms20", "ms210"])
def test_hello_reports_the_stack(config, stack):
    with worker(config, stack) as w:
        hello = w.start()
    assert hello["runtime_version"] == {"ms20": "2.0.0", "ms210": "2.10.0"}[stack]
    assert hello["python"].startswith({"ms20": "3.7.", "ms210": "3.11."}[stack])


def test_lite_outputs_are_copied_not_views(config, exported):
    """Lite 2.0's get_data_to_numpy() is a view that the next predict() overwrites."""
    path, x, ref = exported["ms20"]
    with worker(config, "lite20") as w:
        w.start()
        w.request("load", model="m", path=str(path))
        first = w.request("run", model="m", inputs=x).result["outputs"]
        other = [np.zeros_like(x[0]) + 3.0, x[1]]
        second = w.request("run", model="m", inputs=other).result["outputs"]
        again = w.request("run", model="m", inputs=x).result["outputs"]
    assert not np.array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_allclose(first[0], ref[0], atol=1e-5)


def test_lite_resizes_for_another_batch(config, exported):
    path, x, ref = exported["ms20"]
    with worker(config, "lite20") as w:
        w.start()
        w.request("load", model="m", path=str(path))
        one = w.request("run", model="m", inputs=[x[0][:1], x[1][:1]]).result["outputs"]
    assert one[0].shape == (1, 1)
    np.testing.assert_allclose(one[0], ref[0][:1], atol=1e-5)


def test_graph_runtime_of_2_0_loads_its_own_export_bitwise(config, exported, default_doc):
    graph = {**default_doc["stacks"]["ms20"], "role": "infer", "runtime": "mindspore-graph"}
    with_graph = build(default_doc, source="test", stacks={**default_doc["stacks"], "ms20g": graph})
    path, x, ref = exported["ms20"]
    with worker(with_graph, "ms20g") as w:
        w.start()
        w.request("load", model="m", path=str(path))
        out = w.request("run", model="m", inputs=x).result["outputs"]
    for a, b in zip(out, ref, strict=True):
        assert a.tobytes() == b.tobytes()


def test_lite_load_error_carries_the_native_reason(config, exported):
    path, _, _ = exported["ms210"]
    with worker(config, "lite20") as w:
        w.start()
        with pytest.raises(WorkerError) as err:
            w.request("load", model="m", path=str(path))
    assert err.value.kind == "error"
    assert "Common error code" in err.value.message  # all that Lite's Python API says ...
    assert "maximum mind ir version: 1" in err.value.log  # ... the native log says why
    assert "maximum mind ir version" in err.value.describe()


def test_corrupt_mindir_is_an_error_not_a_crash(config, exported, tmp_path):
    path, x, _ = exported["ms20"]
    bad = tmp_path / "bad.mindir"
    bad.write_bytes(path.read_bytes()[:200])
    with worker(config, "lite20") as w:
        w.start()
        with pytest.raises(WorkerError) as err:
            w.request("load", model="bad", path=str(bad))
        assert err.value.kind == "error"
        # The worker survived and still serves the good model.
        w.request("load", model="m", path=str(path))
        assert w.request("run", model="m", inputs=x).result["outputs"][0].shape == (8, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
def test_tensors_round_trip_through_a_real_stack(config, dtype):
    """Inputs reach the runtime and come back through the protocol bit for bit."""
    import auditor.probes.ppo_policy  # noqa: F401 - the probe package the worker is told about

    x = (np.arange(24).reshape(2, 3, 4) * 1.5).astype(dtype)
    with worker(config, "ms20") as w:
        w.start()
        reply = w.request("echo", value={"x": x, "raw": b"\x00\xff"})
    assert reply.result["value"]["raw"] == b"\x00\xff"
    back = reply.result["value"]["x"]
    assert back.dtype == x.dtype and back.shape == x.shape and back.tobytes() == x.tobytes()
