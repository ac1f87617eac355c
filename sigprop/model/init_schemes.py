"""What each init scheme is, in one registry: its family, what it reads, what it was made for.

The plans themselves (the standard deviations and residual scales a scheme gives a config) live in
:mod:`sigprop.model.init`; this module holds only the schemes' nature, so that the config's validation, the model,
the theory's boundaries, the diagnosis, the doctor and the configuration checks ask one record instead of comparing
names. It imports nothing heavier than the standard library.

Example:
    >>> from sigprop.model.init_schemes import scheme_info
    >>> scheme_info("auto").calibrated, scheme_info("auto").plan_scheme, scheme_info("deepnorm").made_for
    (True, 'dslm', 'post')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["InitScheme", "INIT_SCHEMES", "SCHEME_NAMES", "Family", "scheme_info"]

#: Where a scheme's standard deviations come from: Xavier's 2/(fan_in + fan_out) (possibly scaled with depth or with
#: its residual branches scaled), one ``initializer_range`` for every matrix (BERT), DeepScaleLM's unit-variance
#: plan, µP, Alekseev's σ parametrisation, or the shaped Transformer's 1/fan_in.
Family = Literal["xavier", "bert", "dslm", "mup", "alekseev", "shaped"]
#: A norm placement (``TransformerConfig.norm_position``).
NormPlacement = Literal["pre", "post", "none"]


@dataclass(frozen=True)
class InitScheme:
    """One init scheme's nature (its plan: :data:`sigprop.model.init.SCHEMES`).

    Attributes:
        name: the value of ``TransformerConfig.init``.
        family: where its standard deviations come from (:data:`Family`).
        made_for: the norm placement it was designed for (its residual scales rely on it), None for any.
        needs_input_corr: its plan starts from the token correlation at the first layer's input
            (``config.input_corr``; a patch model's is measured on its images).
        calibrated_from: the scheme whose plan the component rules calibrate into this one's (``auto``: DSLM's),
            None for a scheme whose plan is its own.
        learns_beta: its residual branches' scales β are parameters (LayerScale; SkipInit, ReZero: learnable
            β = 0), whatever ``TransformerConfig.learnable_beta`` says.
    """

    name: str
    family: Family
    made_for: NormPlacement | None = None
    needs_input_corr: bool = False
    calibrated_from: str | None = None
    learns_beta: bool = False

    @property
    def calibrated(self) -> bool:
        """Whether a model's plan is this scheme's plan calibrated by the rules (``plan_for``)."""
        return self.calibrated_from is not None

    @property
    def plan_scheme(self) -> str:
        """The scheme whose uncalibrated plan this one starts from (itself, unless calibrated)."""
        return self.calibrated_from or self.name

    @property
    def unit_embedding(self) -> bool:
        """Whether its token table is drawn for an embedding output of unit variance ((1 − p) after dropout:
        DeepScaleLM, µP, the shaped Transformer) rather than at a fixed standard deviation: a token scale (Gemma's
        √d, ``embed_scale``) then divides the table's standard deviation, and a tied head's input scale is
        multiplied by it, so that the embedding's output and the logits keep the variances the scheme aims at."""
        return self.family in ("dslm", "mup", "shaped")

    @property
    def bounds_depth(self) -> bool:
        """Whether it keeps forward and gradient variance bounded at any depth (DeepScaleLM, Kedia et al. Sec. 3.5),
        its residual scales λ² = 1 − β², β² = ``beta_k`` / N^``beta_alpha``."""
        return self.family == "dslm"


INIT_SCHEMES: dict[str, InitScheme] = {s.name: s for s in (
    InitScheme("xavier", "xavier"),
    InitScheme("bert", "bert"),
    InitScheme("dslm", "dslm", needs_input_corr=True),
    InitScheme("dslm_simple", "dslm"),
    InitScheme("deepnorm", "xavier", made_for="post"),
    InitScheme("dsinit", "xavier"),
    InitScheme("layerscale", "xavier", learns_beta=True),
    InitScheme("skipinit", "xavier", learns_beta=True),
    InitScheme("rezero", "xavier", made_for="none", learns_beta=True),
    InitScheme("noci2022", "xavier"),
    InitScheme("mup", "mup"),
    InitScheme("alekseev", "alekseev"),
    InitScheme("shaped", "shaped", made_for="none"),
    InitScheme("auto", "dslm", needs_input_corr=True, calibrated_from="dslm"),
)}
#: The names ``TransformerConfig.init`` accepts, in the registry's order.
SCHEME_NAMES: tuple[str, ...] = tuple(INIT_SCHEMES)


def scheme_info(name: str) -> InitScheme:
    """The record of init scheme ``name``.

    Args:
        name: a name of :data:`SCHEME_NAMES`.

    Returns:
        Its :class:`InitScheme`.

    Raises:
        ValueError: an unknown name (the message lists the known ones).

    Example:
        >>> scheme_info("dslm_simple").bounds_depth
        True
    """
    try:
        return INIT_SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown init scheme {name!r}; schemes: {', '.join(SCHEME_NAMES)}") from None
