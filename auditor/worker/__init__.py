"""Code that runs inside a stack's own interpreter (Python 3.7+, stdlib + numpy + runtime only).

Nothing here may import the rest of the auditor: the worker is started with only this
package (and the probe packages it is told about) on its import path.
"""
