"""Linear patch embedding of images for the ViT form of the model (Kedia et al. App. H; Dosovitskiy et al.): an
image (batch, C, H, W) is cut into non-overlapping P × P patches, each flattened and mapped by one linear layer to
d, plus a learned position embedding per patch. Written here because no CPU build of torchvision/timm exists on
the machines sigprop targets."""

from __future__ import annotations

import torch
from torch import nn

from ..core.moments import Moments
from ..core.validate import check_range, clip_corr
from .embedding import input_moments

__all__ = ["PatchEmbedding", "patchify"]


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(batch, C, H, W) → (batch, (H/P)·(W/P), C·P·P), patches in row-major order, each flattened as (C, P, P)."""
    if images.dim() != 4:
        raise ValueError(f"images must have shape (batch, channels, height, width), got {tuple(images.shape)}")
    b, c, h, w = images.shape
    p = int(patch_size)
    if h % p or w % p:
        raise ValueError(f"image size {h}×{w} is not divisible by patch_size {p}")
    x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


class PatchEmbedding(nn.Module):
    """patchify → Linear(C·P², d) (+ zero bias) → [CLS] row first with ``cls_token`` → + position table (one row per
    token).

    Standard deviations are declared (``patch_std``, ``position_std``, ``cls_std``) and set by the init plan; the input
    moments of the transformer come from a measured batch (:meth:`measured_moments`), as App. H does for images.
    ``cls_token``: a learned vector c ~ N(0, σ²_c) prepended to every image's patches (Dosovitskiy et al., Hugging
    Face's ``ViTEmbeddings``), read by the classifier.
    """

    def __init__(self, image_size: int, patch_size: int, channels: int, d_model: int,
                 patch_std: float = 0.02, position_std: float = 0.02, cls_token: bool = False,
                 cls_std: float = 0.02) -> None:
        super().__init__()
        for v, name in ((image_size, "image_size"), (patch_size, "patch_size"), (channels, "channels"),
                        (d_model, "d_model")):
            check_range(v, name, lo=1.0, allowed="integers >= 1")
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} must be divisible by patch_size {patch_size}")
        self.image_size, self.patch_size, self.channels = int(image_size), int(patch_size), int(channels)
        self.n_patches = (image_size // patch_size) ** 2
        self.n_tokens = self.n_patches + (1 if cls_token else 0)
        self.proj = nn.Linear(channels * patch_size**2, d_model)
        self.cls = nn.Parameter(torch.empty(1, d_model)) if cls_token else None  # one row, as a table's
        self.position = nn.Embedding(self.n_tokens, d_model)
        self.patch_std, self.position_std, self.cls_std = float(patch_std), float(position_std), float(cls_std)
        if self.proj.weight.is_meta:  # built on the meta device: the owner initialises after materialising
            return
        with torch.no_grad():
            self.proj.weight.normal_(0.0, self.patch_std)
            self.proj.bias.zero_()
            self.position.weight.normal_(0.0, self.position_std)
            if self.cls is not None:
                self.cls.normal_(0.0, self.cls_std)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[-2:] != (self.image_size, self.image_size) or images.shape[-3] != self.channels:
            raise ValueError(f"expected images of shape (batch, {self.channels}, {self.image_size}, "
                             f"{self.image_size}), got {tuple(images.shape)}")
        x = self.proj(patchify(images, self.patch_size))
        if self.cls is not None:
            x = torch.cat((self.cls.expand(*x.shape[:-2], 1, x.shape[-1]), x), dim=-2)  # (…, 1 + n, d)
        return x + self.position.weight

    def forward_moments(self, images: torch.Tensor) -> Moments:
        """Moments of this embedding's output on ``images`` in expectation over its weights (Kedia et al. App. A.2
        applied to the patches, as App. H prescribes for ViT): with y_t = W p_t + e_t, W ~ N(0, σ²_p), the
        position rows e_t ~ N(0, σ²_e) independent of W and of each other, and zero bias,

            E[y_ti] = 0,   E[y_ti²] = σ²_p |p_t|² + σ²_e,   E[y_ti y_si] = σ²_p ⟨p_t, p_s⟩ (t ≠ s),

        so the variance is σ²_p mean_t |p_t|² + σ²_e over the batch's patches and the token correlation is the mean
        over images and ordered pairs t ≠ s of σ²_p ⟨p_t, p_s⟩, divided by it (the measurement's definition,
        :func:`~sigprop.components.embedding.input_moments`); different units are uncorrelated (hidden correlation
        0). These are :meth:`gram`'s diagonal and off-diagonal means. Exact for the image's own patches, whatever
        their distribution; Gaussian in the weights. Float64."""
        g = self.gram(images)
        b, n, _ = g.shape
        diagonal = torch.diagonal(g, dim1=-2, dim2=-1).sum()
        var = float(diagonal) / (b * n)
        cov = float(g.sum() - diagonal) / (b * n * (n - 1)) if n > 1 else 0.0
        return Moments(mean=0.0, var=var, corr=clip_corr(cov / var, tol=1e-9), corr_hidden=0.0)

    def gram(self, images: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token-resolved moments (:mod:`sigprop.theory.resolved`): the per-element token Gram matrix (batch, n, n) of
        the output on ``images``, G_ts = E[y_t^a y_s^a] = σ²_p ⟨p_t, p_s⟩ + σ²_e [t = s] (float64;
        :meth:`forward_moments` pools it); with a [CLS] token, its row c + e_0 comes first: G_00 = σ²_c + σ²_e, and
        it is uncorrelated with every patch token (c and e_0 are independent of the patches' weights and rows).
        ``segment_ids`` must be None (images have none)."""
        if segment_ids is not None:
            raise ValueError("a patch embedding has no segments")
        p = self._patches(images)
        gram = self.patch_std**2 * (p @ p.transpose(-1, -2))
        if self.cls is not None:
            gram = torch.nn.functional.pad(gram, (1, 0, 1, 0))
            gram[:, 0, 0] = self.cls_std**2
        return gram + self.position_std**2 * torch.eye(gram.shape[1], dtype=torch.float64)

    def _patches(self, images: torch.Tensor) -> torch.Tensor:
        images = torch.as_tensor(images)
        if images.dim() != 4 or tuple(images.shape[-3:]) != (self.channels, self.image_size, self.image_size):
            raise ValueError(f"expected images of shape (batch, {self.channels}, {self.image_size}, "
                             f"{self.image_size}), got {tuple(images.shape)}")
        return patchify(images.detach().double().cpu(), self.patch_size)  # (batch, n, C·P²)

    def measured_moments(self, images: torch.Tensor) -> Moments:
        """Moments of this embedding's output on ``images`` (statistics pooled over the batch)."""
        with torch.no_grad():
            return input_moments(self.forward(images))
