"""Guarded state machines: one transition table per thing that has a state.

A :class:`StateTable` is declared once per entity (its states enum, the legal changes, the
terminal states) and every state change of that entity goes through :meth:`StateTable.transition`
(or :meth:`StateTable.check`), which raises :class:`IllegalTransition` naming the entity, the
subject, the old and the new state for any change the table does not list -- loudly, never a
silent no-op (STYLE.md, "one table for the job state machine"). The tables built on it:
``vgrid_runtime.job_states`` (gLite jobs at the broker), ``vwn_agents.ce_jobs`` (jobs as a CE
sees them), ``vwn_agents.vwn_states`` (VWNs of a node agent), ``vwn_agents.leasing.model``
(leases); docs/architecture.md, "State tables".
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

E = TypeVar("E", bound=enum.Enum)


def _name(state) -> str:
    return str(state.value) if isinstance(state, enum.Enum) else str(state)


class IllegalTransition(ValueError):
    """A state change a :class:`StateTable` does not allow, e.g. ``job k: illegal transition
    Done -> Running (allowed from Done: Cleared)``. Attributes: ``entity`` (e.g. "job",
    "lease"), ``subject`` (the key or id, may be None), ``old``, ``new`` (states) and
    ``allowed`` (the states reachable from ``old``)."""

    def __init__(self, entity: str, subject, old, new, allowed: Iterable = ()) -> None:
        allowed = frozenset(allowed)
        names = ", ".join(sorted(_name(s) for s in allowed)) or "none (final state)"
        who = f"{entity} {subject}" if subject is not None else entity
        super().__init__(f"{who}: illegal transition {_name(old)} -> {_name(new)} "
                         f"(allowed from {_name(old)}: {names})")
        self.entity, self.subject, self.old, self.new, self.allowed = entity, subject, old, new, allowed


class StateTable(Generic[E]):
    """The transition table of one entity.

    ``entity`` names it in errors; ``states`` is its enum; ``transitions`` maps every state to
    the states it may change to (a state missing from the mapping has no exits); ``terminal``
    are the states after which nothing happens any more (they must have no exits, except those
    listed in ``terminal_exits``, e.g. gLite's Done -> Cleared). ValueError at declaration for a
    table that names a foreign state or gives a terminal state an undeclared exit.
    """

    def __init__(self, entity: str, states: type[E], transitions: Mapping[E, Iterable[E]],
                 terminal: Iterable[E], terminal_exits: Iterable[E] = ()) -> None:
        self.entity = entity
        self.states = states
        self.transitions: dict[E, frozenset[E]] = {s: frozenset(transitions.get(s, ())) for s in states}
        self.terminal: frozenset[E] = frozenset(terminal)
        extra = frozenset(terminal_exits)
        for old, targets in self.transitions.items():
            for s in targets | self.terminal | extra:
                if not isinstance(s, states):
                    raise ValueError(f"{entity} table: {s!r} is not a {states.__name__}")
            if old in self.terminal and not targets <= extra:
                raise ValueError(f"{entity} table: terminal state {_name(old)} has exits "
                                 f"{sorted(_name(s) for s in targets - extra)}")
        for s in transitions:
            if not isinstance(s, states):
                raise ValueError(f"{entity} table: {s!r} is not a {states.__name__}")

    def allowed(self, old: E) -> frozenset[E]:
        """The states ``old`` may change to."""
        return self.transitions[old]

    def is_legal(self, old: E, new: E) -> bool:
        return new in self.transitions[old]

    def check(self, old: E, new: E, subject=None) -> E:
        """Return ``new`` if ``old -> new`` is in the table, else raise :class:`IllegalTransition`
        (``subject``: the key or id named in the error)."""
        if new not in self.transitions[old]:
            raise IllegalTransition(self.entity, subject, old, new, self.transitions[old])
        return new

    transition = check

    def edges(self) -> list[tuple[E, E]]:
        """Every legal (old, new) pair, in enum order (for docs and tests)."""
        order = list(self.states)
        return [(a, b) for a in order for b in order if b in self.transitions[a]]
