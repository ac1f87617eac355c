"""The theory of a whole model: :func:`predict` walks the model's module tree (:mod:`sigprop.walk`) from its input
boundary to its output and back (:mod:`.sweep`, :mod:`.boundaries`), in the exchangeable or the token-resolved
state (:mod:`.resolved`)."""
