"""``iabma refit``: the gate of a bundle refitted on the outcomes its predictions received.

:mod:`~training.refit.data` gathers the outcome rows and their inputs (and refuses what it
cannot use), :mod:`~training.refit.gate` refits the gate on them (the bundle's own,
:mod:`~training.refit.settings`) and compares it with the served one on the latest
requests (:mod:`~training.refit.split`), and :mod:`~training.refit.export` writes the new
version beside the old one, with the same expert files.
"""
