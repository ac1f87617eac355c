"""The training tests' corpus and tokenizer cache serve the experiment tests too."""

from tests.train.conftest import corpus, own_cache  # noqa: F401 - fixtures
