"""What the commands produce: figures, the demo's report, the environment report, and the runs behind predict,
measure, compare and inits (one validated request each, writing its JSON and figure)."""
