"""The event outbox's configuration fields, shared by the node agent's and the CE agent's
schemas (``OutboxOptions``: a mixin like ``vgrid_runtime.authn.TLSOptions``; the outbox itself
is ``vwn_agents.outbox.Outbox``, docs/vwn.md "Event outbox")."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(kw_only=True)
class OutboxOptions:
    """``outbox_give_up_s`` (s), ``outbox_max_items`` (events) and ``outbox_senders``
    (threads) of ``Outbox(give_up_s, max_items, senders)``."""

    outbox_give_up_s: float = field(default=3600.0, metadata={
        "help": "an event still undeliverable this long after its first failure is dropped (s)"})
    outbox_max_items: int = field(default=100000, metadata={
        "help": "most undelivered events kept; beyond it the oldest is dropped (logged)"})
    outbox_senders: int = field(default=4, metadata={
        "help": "threads delivering events, one event per job at a time (1..32)"})

    def outbox_problem(self) -> str | None:
        """A configuration error of these fields naming the field, or None (call from ``validate``)."""
        if not 1 <= self.outbox_senders <= 32:
            return f"field 'outbox_senders': must be 1..32, got {self.outbox_senders}"
        if not self.outbox_give_up_s > 0:
            return f"field 'outbox_give_up_s': must be > 0, got {self.outbox_give_up_s}"
        if self.outbox_max_items < 1:
            return f"field 'outbox_max_items': must be >= 1, got {self.outbox_max_items}"
        return None
