"""The walker's state protocol: both states carry every member of :class:`WalkState` (mypy checks their signatures,
``pyproject.toml``), and each member states its contract."""

from __future__ import annotations

import inspect

from sigprop.theory.resolved import GramState
from sigprop.walk.exchangeable import EXCHANGEABLE, ExchangeableState
from sigprop.walk.state import WalkState

METHODS = [name for name, value in vars(WalkState).items() if inspect.isfunction(value) and not name.startswith("_")]


def test_both_states_are_walk_states():
    assert isinstance(EXCHANGEABLE, WalkState)
    assert isinstance(GramState(), WalkState)


def test_a_state_missing_a_step_is_not_a_walk_state():
    class Partial(ExchangeableState):
        pool_grad = None

    assert not isinstance(Partial(), WalkState)


def test_every_step_has_its_contract_written_down():
    assert len(METHODS) >= 13
    assert all(inspect.getdoc(getattr(WalkState, name)) for name in METHODS)
