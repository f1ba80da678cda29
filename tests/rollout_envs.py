"""Environments that fail on purpose, for the rollout's failure tests. Importing this module
registers them; the environment process imports it for an id such as
``tests.rollout_envs:AuditorRaisesInStep-v0`` (gymnasium's "module:id" form)."""

from __future__ import annotations

import os
import time

import gymnasium
import numpy as np
from gymnasium.spaces import Box

FAULT_STEP = 3


class Faulty(gymnasium.Env):
    """Pendulum's spaces, a dull dynamic, and one fault at step FAULT_STEP (or in reset)."""

    observation_space = Box(-1.0, 1.0, (3,), np.float32)
    action_space = Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self, fault: str):
        self.fault = fault
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.fault == "reset":
            raise ValueError("cannot reset: the simulator's licence expired")
        self.t = 0
        return np.full(3, 0.5, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == FAULT_STEP:
            if self.fault == "step":
                raise RuntimeError(f"the simulator diverged at step {self.t}")
            if self.fault == "hang":
                marker = os.environ.get("AUDITOR_TEST_HANG_MARKER")
                if marker:  # tells a test the step is hanging now (not still starting up)
                    open(marker, "w").close()
                time.sleep(3600)
        if self.fault == "print":
            print(f"step {self.t}: a chatty environment writes to stdout")
        obs = np.clip(np.full(3, 0.5, np.float32) - 0.01 * self.t * np.asarray(action, np.float32), -1, 1)
        return obs.astype(np.float32), -float(np.sum(np.square(action))), False, self.t >= 10, {}


for _fault, _name in (
    ("step", "AuditorRaisesInStep-v0"),
    ("reset", "AuditorRaisesInReset-v0"),
    ("hang", "AuditorHangsInStep-v0"),
    ("print", "AuditorPrints-v0"),
):
    gymnasium.register(_name, entry_point=Faulty, kwargs={"fault": _fault})
