"""What a prediction and a measurement mean together: their comparison, the diagnosis (explode, vanish, collapse),
the init sweep (every scheme at every depth), and theory against measurement for one configuration."""
