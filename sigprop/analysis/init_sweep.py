"""Which initialisation keeps this model's signal healthy? The theory of one configuration under several init schemes
and depths, diagnosed side by side, and the order of growth with depth that Kedia et al. Table 3 states per method.

For each scheme and depth N, :func:`sweep_inits` predicts the model (:func:`sigprop.predict`: theory only, no weights;
the input from Zipf(1) tokens, App. A.1, or from a batch, which a patch model needs for its images; the gradient from
the loss) and diagnoses it (:func:`sigprop.analysis.diagnosis.diagnose`): the forward variance's change from the first
layer to the last, the gradient variance's from the last layer to the first, the last layer's token correlation. A
scheme the configuration refuses is kept as a row with its error ("refused: …"), and so is one whose variance overflows
in the theory before the last layer ("overflow: …"; DeepNet's up-weighted skip in a Pre-LN stack reaches 1e93 by 48
layers).

With three or more depths, :func:`depth_orders` reads the effective order of each change in N over those depths,
as Table 3 states orders: log c(N) = a + e·log N (a power, "~N^e"; "O(1)" when |e| < 0.15) against
log c(N) = a + b·N (exponential, "~c^N" with c = e^b per layer), whichever leaves the smaller squared residual;
exponential only where it also changes c by more than 2× over the depths. Table 3's orders are limits, and a
bounded change can still drift over finite depths: DeepScaleLM's gradient change, Π(1 + k(C6,n − 1)/N) (App. E.3),
goes from ×0.15 at 12 layers to ×0.35 at 768 in the masked-LM encoder, which reads ~N^0.2; the drift is all in
the bottom quarter, where the stream's token correlation is still near the input's and C6 > 1
(``bench/dslm_gradient_drift.py``). It describes the predictions; nothing is fitted to a measurement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..core.errors import NotFinite
from ..core.jsonio import finite_or_null
from .diagnosis import Diagnosis, Finding, diagnose, exponential_and_power_fits

__all__ = ["InitRow", "DepthOrder", "sweep_inits", "depth_orders", "sweep_steps", "sweep_json", "DEFAULT_INITS"]

#: The schemes compared by default: the paper's Table 3 methods and their relatives (sigprop.model.init's plans).
DEFAULT_INITS = ("xavier", "bert", "dsinit", "layerscale", "skipinit", "deepnorm", "dslm_simple", "dslm")
#: Below this |exponent| a change counts as O(1) in N.
CONSTANT_EXPONENT = 0.15


@dataclass(frozen=True)
class InitRow:
    """One scheme at one depth: its diagnosis (None with ``error`` when the configuration refuses the scheme or the
    theory overflows) and the seconds its prediction took."""

    init: str
    n_layers: int
    diagnosis: Diagnosis | None
    seconds: float = 0.0
    error: str | None = None

    def finding(self, quantity: str, stack: str | None = None) -> Finding | None:
        """The finding on ``quantity`` of ``stack`` ("encoder" / "decoder" of an encoder–decoder; default: the
        first stack)."""
        if self.diagnosis is None:
            return None
        return next((f for f in self.diagnosis.findings if f.quantity == quantity and stack in (None, f.stack)),
                    None)

    def stacks(self) -> list[str]:
        """The stacks diagnosed ("" for an encoder or a decoder alone)."""
        return [] if self.diagnosis is None else list(dict.fromkeys(f.stack for f in self.diagnosis.findings))

    def to_dict(self) -> dict:
        return {"init": self.init, "n_layers": self.n_layers, "seconds": self.seconds, "error": self.error,
                "diagnosis": None if self.diagnosis is None else self.diagnosis.to_dict()}



@dataclass(frozen=True)
class DepthOrder:
    """The effective order in N of one scheme's change of one quantity over the swept depths: ``kind``
    "constant", "power" (``rate`` the exponent), "exponential" (``rate`` the factor per added layer), "identity"
    (every depth's stack passes its input on) or "mixed" (some depths do: the scheme's β depends on N)."""

    init: str
    quantity: str
    kind: str
    rate: float

    def to_dict(self) -> dict:
        return finite_or_null({**asdict(self), "text": self.describe()})

    def describe(self) -> str:
        if self.kind == "constant":
            return "O(1)"
        if self.kind == "power":
            return f"~N^{self.rate:.2f}"
        if self.kind == "exponential":
            return f"~{self.rate:.4f}^N"
        if self.kind == "identity":
            return "identity (β ≈ 0)"
        return "β depends on N"


def sweep_steps(config, inits: Sequence[str], depths: Sequence[int], batch=None,
                token_resolved: bool | None = None) -> int:
    """The progress steps :func:`sweep_inits` reports: a layer per sweep per scheme and depth
    (:func:`sigprop.theory.predict.prediction_steps`); ``batch`` a :class:`~sigprop.model.batch.Batch` or anything
    it reads (a dict of tensors, token ids)."""
    from ..model.batch import Batch
    from ..theory.predict import prediction_steps

    given = batch is not None
    size = len(Batch.from_any(batch).inputs) if given else 1
    return len(inits) * sum(prediction_steps(config.replace(n_layers=n), given, token_resolved, labels_given=given,
                                             batch_size=size) for n in depths)


def sweep_inits(config, inits: Sequence[str] = DEFAULT_INITS, depths: Sequence[int] | None = None,
                attention_heads: int | None = None, progress: Callable[[int], None] | None = None,
                batch: dict | None = None, token_resolved: bool | None = None) -> list[InitRow]:
    """Predict and diagnose ``config`` under each of ``inits`` at each of ``depths`` (default: its own n_layers;
    an encoder–decoder's decoder keeps its n_decoder_layers, or follows n_layers when that is None).

    Without ``batch`` the input is Zipf(1) tokens in theory (App. A.1) and the gradient the loss's; with one (token ids,
    or a patch model's images, which it needs: :func:`sigprop.analysis.experiment.config_batch`) the boundaries come
    from the batch as in :func:`sigprop.analysis.experiment.predict_for_batch`, token-resolved by default
    (``token_resolved``), and a DSLM patch model's input correlation from its images (App. H)."""
    from ..components.draws import DEFAULT_HEADS

    if config.input != "tokens" and batch is None:
        raise ValueError("a patch model's input moments come from its images: pass batch= (sigprop.analysis.experiment."
                         "config_batch), or on the command line let `sigprop inits` draw the digits")
    if not inits:
        raise ValueError("no init schemes to compare")
    depths = [config.n_layers] if depths is None else [int(n) for n in depths]
    if not depths or any(n < 1 for n in depths):
        raise ValueError(f"depths must be layer counts >= 1 (got {depths})")
    heads = attention_heads or DEFAULT_HEADS
    return [_predict_one(config, init, n, heads, progress, batch, token_resolved) for init in inits for n in depths]


def _predict_one(config, init: str, n_layers: int, attention_heads: int, progress, batch, token_resolved) -> InitRow:
    """One row of :func:`sweep_inits`; a refused scheme or an overflowing theory still reports all its steps."""
    from .experiment import batch_prediction, with_batch_input_correlation

    t0 = time.perf_counter()
    done = []

    def step(k: int) -> None:
        done.append(k)
        if progress is not None:
            progress(k)

    try:
        variant = config.replace(init=init, n_layers=n_layers)
        if batch is not None:
            variant = with_batch_input_correlation(variant, batch)
        prediction = batch_prediction(variant, batch, attention_heads=attention_heads, token_resolved=token_resolved)
    except (ValueError, NotImplementedError, KeyError) as err:
        error = f"refused: {err}"
    else:
        try:
            return InitRow(init, n_layers, diagnose(prediction.profile(progress=step)), time.perf_counter() - t0)
        except (NotFinite, FloatingPointError, OverflowError) as err:
            error = f"overflow: {err}"
    if progress is not None:
        progress(sweep_steps(config, [init], [n_layers], batch, token_resolved) - sum(done))
    return InitRow(init, n_layers, None, time.perf_counter() - t0, error)


def _order(init: str, quantity: str, depths: np.ndarray, changes: np.ndarray) -> DepthOrder | None:
    if depths.size < 3 or np.unique(depths).size < 3 or not np.all(np.isfinite(changes)) or np.any(changes <= 0):
        return None
    logs = np.log(changes)
    fits = exponential_and_power_fits(depths, logs)
    if fits["exponential"][0] < fits["power"][0] and logs.max() - logs.min() > math.log(2.0):
        return DepthOrder(init, quantity, "exponential", fits["exponential"][1])
    exponent = fits["power"][1]
    if abs(exponent) < CONSTANT_EXPONENT:
        return DepthOrder(init, quantity, "constant", exponent)
    return DepthOrder(init, quantity, "power", exponent)


def depth_orders(rows: Sequence[InitRow]) -> list[DepthOrder]:
    """Per scheme and quantity (forward variance, last / first layer; gradient variance, first / last), the order
    in N of its change over the depths of ``rows`` (module docstring); schemes with fewer than three distinct
    depths, or a refused or non-finite one, are left out."""
    orders = []
    for init in dict.fromkeys(r.init for r in rows):
        mine = [r for r in rows if r.init == init]
        if any(r.diagnosis is None for r in mine):
            continue
        identity = [r.finding("stream") is not None for r in mine]
        if any(identity) and len({r.n_layers for r in mine}) >= 3:
            kind = "identity" if all(identity) else "mixed"
            orders += [DepthOrder(init, q, kind, math.nan) for q in ("fwd_var", "grad_var")]
            continue
        depths = np.array([r.n_layers for r in mine], dtype=np.float64)
        for quantity in ("fwd_var", "grad_var"):
            changes = np.array([r.finding(quantity).change for r in mine], dtype=np.float64)
            order = _order(init, quantity, depths, changes)
            if order is not None:
                orders.append(order)
    return orders


def sweep_json(config, rows: Sequence[InitRow], orders: Sequence[DepthOrder]) -> dict:
    """The JSON of an init sweep: the config, every row (scheme, depth, diagnosis or error) and the orders in N."""
    return {"kind": "init_sweep", "config": config.to_dict(), "rows": [r.to_dict() for r in rows],
            "orders": [o.to_dict() for o in orders]}
