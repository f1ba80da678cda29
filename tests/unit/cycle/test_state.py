"""The cycle's state: what an abort kills, and that it keeps nothing it no longer uses."""

from __future__ import annotations

import gc

import pytest

from auditor.config.tables import Config
from auditor.cycle.state import CycleState
from auditor.results import CycleAborted
from auditor.stacks.session import Reach


class Child:
    """A worker stand-in: something an abort must kill, holding a buffer like a stderr tail."""

    def __init__(self) -> None:
        self.killed = False
        self.tail = ["a line of a worker's stderr"] * 400

    def kill(self) -> None:
        self.killed = True


def test_an_abort_kills_what_is_in_use_and_the_state_holds_nothing_let_go():
    config = Config("<test>", "sqlite://", {}, (), {})
    state = CycleState(config, Reach(config))
    in_use, closed = Child(), Child()
    state.register(in_use)
    state.register(closed)
    gc.collect()
    assert len(state._children) == 2
    del closed  # a closed worker: its session let go of it
    gc.collect()
    assert list(state._children) == [in_use]  # its buffers went with it (a fleet's cycle: one per host)
    state.abort()
    assert in_use.killed
    with pytest.raises(CycleAborted):
        state.register(Child())
