"""MindSpore Lite (the cloud inference package): loads a MindIR. Kept empty: stack workers
import this package."""
