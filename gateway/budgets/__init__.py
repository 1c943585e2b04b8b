"""Spend limits in the gateway: who pays for what, what a chat is told, what the admins are told, and
what ``/budget``, ``herald budget`` and the console show.

The agent's spend gate (``agent.spending``) checks every model request against the limits of the
scopes it is charged to; this package decides those scopes and their limits from ``budgets:`` in the
config (:mod:`gateway.budgets.limits`, pure), says so to people (:mod:`gateway.budgets.lines`, pure),
keeps the gateway's side of it (:mod:`gateway.budgets.service`: one line per chat and window, the
admins' warnings) and shows where every scope stands (:mod:`gateway.budgets.book`: the read API of
``/budget``, ``herald budget`` and the console).
"""
