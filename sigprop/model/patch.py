"""Linear patch embedding of images for the ViT form of the model (Kedia et al. App. H; Dosovitskiy et al.): an
image (batch, C, H, W) is cut into non-overlapping P × P patches, each flattened and mapped by one linear layer to
d, plus a learned position embedding per patch. Written here because no CPU build of torchvision/timm exists on
the machines sigprop targets."""

from __future__ import annotations

import torch
from torch import nn

from ..components.embedding import input_moments
from ..moments import Moments, check_range

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
    """patchify → Linear(C·P², d) (+ zero bias) → + position table (n_patches × d).

    Standard deviations are declared (``patch_std``, ``position_std``) and set by the init plan; the input moments
    of the transformer come from a measured batch (:meth:`measured_moments`), as App. H does for images.
    """

    def __init__(self, image_size: int, patch_size: int, channels: int, d_model: int,
                 patch_std: float = 0.02, position_std: float = 0.02):
        super().__init__()
        for v, name in ((image_size, "image_size"), (patch_size, "patch_size"), (channels, "channels"),
                        (d_model, "d_model")):
            check_range(v, name, lo=1.0, allowed="integers >= 1")
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} must be divisible by patch_size {patch_size}")
        self.image_size, self.patch_size, self.channels = int(image_size), int(patch_size), int(channels)
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Linear(channels * patch_size**2, d_model)
        self.position = nn.Embedding(self.n_patches, d_model)
        self.patch_std, self.position_std = float(patch_std), float(position_std)
        if self.proj.weight.is_meta:  # built on the meta device: the owner initialises after materialising
            return
        with torch.no_grad():
            self.proj.weight.normal_(0.0, self.patch_std)
            self.proj.bias.zero_()
            self.position.weight.normal_(0.0, self.position_std)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[-2:] != (self.image_size, self.image_size) or images.shape[-3] != self.channels:
            raise ValueError(f"expected images of shape (batch, {self.channels}, {self.image_size}, "
                             f"{self.image_size}), got {tuple(images.shape)}")
        x = self.proj(patchify(images, self.patch_size))
        return x + self.position.weight

    def measured_moments(self, images: torch.Tensor) -> Moments:
        """Moments of this embedding's output on ``images`` (statistics pooled over the batch)."""
        with torch.no_grad():
            return input_moments(self.forward(images))
