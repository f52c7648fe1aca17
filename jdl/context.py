"""The evaluation context every compiled expression closure and lazy function receives.

A Ctx names the current record (`ad`: unscoped references and `parent`), the top record of its
side (`me`: `my.`/`self.`), the record matched against (`other`: `other.`/`target.`), the
attributes being evaluated (`active`: circular definitions) and `now`, what time() returns
(the caller's clock: nothing in jdl reads the wall clock).
Built by jdl.evaluator, jdl.model (matches, rank_value) and the gang-matching functions of
jdl.glite_functions. Source: HTCondor manual "ClassAd Evaluation Semantics" (MY/TARGET).
"""
from __future__ import annotations


class Ctx:
    """Evaluation context; `active` holds (id(ad), name) pairs being evaluated (cycles);
    `now` is what time() returns: seconds from the caller's clock (None: time() is error)."""

    __slots__ = ("ad", "me", "other", "active", "now")

    def __init__(self, ad, me, other, active, now=None):
        self.ad = ad
        self.me = me
        self.other = other
        self.active = active
        self.now = now
