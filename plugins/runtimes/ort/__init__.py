"""ONNX Runtime: loads the ONNX file a MindSpore train stack exports. Kept empty: stack workers
import this package."""
