"""sigprop.data: real and synthetic inputs (tokens, images), with nothing downloaded (ARCHITECTURE.md, "Dependencies").

* :mod:`~sigprop.data.corpus`: the corpus, by default the Python standard library's own ``*.py`` sources on this
  machine, or a user's text file / folder (``--data PATH``).
* :mod:`~sigprop.data.tokenizer`: a byte-level BPE tokenizer trained locally with ``tokenizers`` and cached.
* :mod:`~sigprop.data.batches`: the corpus encoded once (cached ``.npy``), reproducible random windows as batches.
* :mod:`~sigprop.data.zipf`: i.i.d. Zipf-distributed synthetic tokens (Kedia et al. App. A.1).
* :mod:`~sigprop.data.mlm`: BERT masked-LM corruption and causal next-token labels.
* :mod:`~sigprop.data.digits`: scikit-learn's bundled 8×8 digits, upsampled, with their classes: the images of
  patch (ViT) models.
"""

from .batches import TokenStream, encode_texts, load_batch, token_batches
from .corpus import DEFAULT_MAX_BYTES, TEXT_SUFFIXES, corpus_files, default_corpus_path, read_texts
from .digits import digits, digits_images
from .mlm import IGNORE_INDEX, causal_lm_labels, mask_tokens
from .tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    default_cache_dir,
    load_or_train_tokenizer,
    mask_id,
    pad_id,
    special_id,
)
from .zipf import zipf_probs, zipf_tokens

__all__ = [
    "digits",
    "digits_images",
    "DEFAULT_MAX_BYTES",
    "TEXT_SUFFIXES",
    "default_corpus_path",
    "corpus_files",
    "read_texts",
    "SPECIAL_TOKENS",
    "MIN_VOCAB_SIZE",
    "default_cache_dir",
    "load_or_train_tokenizer",
    "pad_id",
    "mask_id",
    "special_id",
    "TokenStream",
    "encode_texts",
    "token_batches",
    "load_batch",
    "zipf_probs",
    "zipf_tokens",
    "IGNORE_INDEX",
    "mask_tokens",
    "causal_lm_labels",
]
