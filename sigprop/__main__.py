"""``python -m sigprop``: the command line (:mod:`sigprop.cli`), for machines where the console script is not on
the path."""

from .cli import main

main()
