"""MindSpore: PyNative (builds probes, exports MindIR and ONNX) and graph mode (loads a MindIR
as a GraphCell). Kept empty: stack workers import this package."""
