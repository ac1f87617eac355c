"""Experiments: the papers' training claims as grids of runs (models × learning rates × seeds), executed as parallel
``sigprop train`` processes, resumable, summarised as a table and a figure (``sigprop experiment``)."""
