"""The configurable Transformer, its configuration and its initialisation plans."""

from .config import TransformerConfig, apply_overrides, config_from_dict
from .init import SCHEMES, InitPlan, make_plan
from .objective import make_batch
from .shaped import anneal_shaped
from .transformer import Transformer, plan_for

__all__ = ["TransformerConfig", "Transformer", "InitPlan", "SCHEMES", "make_plan", "plan_for", "make_batch",
           "config_from_dict", "apply_overrides", "anneal_shaped"]
