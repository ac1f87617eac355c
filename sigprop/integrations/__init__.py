"""A :class:`~sigprop.monitor.monitor.Monitor` inside training frameworks: :mod:`sigprop.integrations.hf` (a Hugging
Face ``TrainerCallback``; needs ``transformers``, the extra ``hf``) and :mod:`sigprop.integrations.lightning` (a
Lightning ``Callback``; needs ``lightning``). Nothing is imported here: each module imports its framework, and
``import sigprop`` needs neither."""
