"""The ``sigprop`` command line: one module per command group, the options they share, the terminal, and the one
error handler (:func:`sigprop.cli.app.main`)."""

from .app import app, main

__all__ = ["app", "main"]
