"""Build a pinned corpus: Python source of permissive licence, tokenised once, stored as token ids in the repository.

    PYTHONPATH=. python bench/build_pinned_corpus.py --out corpora/python-v1 [--max-bytes 128000000]

The text: the ``*.py`` files of this interpreter's standard library (PSF licence) and of the installed packages
whose licence metadata names a permissive licence (:data:`_PERMISSIVE`: MIT, BSD, Apache, PSF, ISC and the like;
a package with another licence, or none stated, is left out), with the skips of ``data=python`` (test suites,
caches, compiled modules), taken in ``data=python``'s fixed pseudo-random order (SHA-1 of each file's path) up to
``--max-bytes``. A byte-level BPE tokenizer of ``--vocab-size`` is trained on it (:mod:`sigprop.data.tokenizer`),
the files are encoded in sorted order, documents joined by ``[SEP]``, and the ids are written little-endian uint16,
xz-compressed (``ids.u16.xz``), beside the tokenizer (``tokenizer.json``) and ``manifest.json`` (the SHA-256 of the
raw ids, which :mod:`sigprop.data.pinned` checks on every load, and where the text came from: the Python version,
each package's name, version, licence and file count).

The output is what ``--train-set data=pinned:NAME`` trains on wherever the repository is: the ids, not the text or the
tokenizer, are the corpus, so neither the machine's installed files nor the tokenizers library's version can change
it. Building again on another machine gives another corpus (another name).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import json
import lzma
import platform
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from sigprop.data.batches import encode_texts
from sigprop.data.corpus import _select, _walk, read_texts
from sigprop.data.tokenizer import special_id, train_tokenizer

#: Words of a package's licence metadata that mark it permissive (matched case-insensitively in its
#: License-Expression, License field or "License ::" classifiers); any copyleft word excludes it.
_PERMISSIVE = ("mit", "bsd", "apache", "psf", "python software foundation", "isc", "zlib", "unlicense", "cc0",
               "hpnd", "historical permission")
_COPYLEFT = ("gpl", "mpl", "mozilla", "epl", "eclipse", "cddl", "agpl", "lgpl", "proprietary", "commercial")


def _licence(dist: metadata.Distribution) -> str:
    meta = dist.metadata
    parts = [meta.get("License-Expression") or "", (meta.get("License") or "").split("\n")[0][:80]]
    parts += [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return "; ".join(p for p in parts if p.strip())


def _is_permissive(licence: str) -> bool:
    low = licence.lower()
    return any(w in low for w in _PERMISSIVE) and not any(w in low for w in _COPYLEFT)


def _package_files(root: Path) -> tuple[dict[Path, str], list[dict]]:
    """File → package name for the ``*.py`` files of permissive packages under ``root``, and every package's record."""
    owner: dict[Path, str] = {}
    packages = []
    for dist in sorted(metadata.distributions(path=[str(root)]), key=lambda d: d.metadata["Name"].lower()):
        name, licence = dist.metadata["Name"], _licence(dist)
        keep = _is_permissive(licence)
        files = [Path(dist.locate_file(f)).resolve() for f in dist.files or () if str(f).endswith(".py")]
        if keep:
            for f in files:
                owner[f] = name
        packages.append({"name": name, "version": dist.version, "licence": licence, "kept": keep, "files": 0})
    return owner, packages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-bytes", type=int, default=128_000_000)
    parser.add_argument("--vocab-size", type=int, default=2048)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    owner, packages = _package_files(site)
    candidates = _walk(stdlib, (".py",), stdlib=True) + [p for p in _walk(site, (".py",), stdlib=True)
                                                         if p.resolve() in owner]
    files = _select(sorted(set(candidates)), Path("/"), args.max_bytes, "the permissive Python corpus")
    counts: dict[str, int] = {}
    for f in files:
        key = owner.get(f.resolve(), "(standard library)")
        counts[key] = counts.get(key, 0) + 1
    for p in packages:
        p["files"] = counts.get(p["name"], 0)
    total = sum(f.stat().st_size for f in files)
    print(f"{len(files)} files, {total / 1e6:.1f} MB ({counts.get('(standard library)', 0)} of the standard library)",
          flush=True)
    texts = list(read_texts(files))
    tok = train_tokenizer(texts, args.vocab_size, length=len(texts))
    print(f"tokenizer trained ({time.perf_counter() - t0:.0f} s)", flush=True)
    ids = encode_texts(tok, texts).astype("<u2")
    raw = ids.tobytes()
    print(f"{ids.size} tokens ({time.perf_counter() - t0:.0f} s); compressing ...", flush=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent if args.out.parent.exists() else None) as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        (folder / "ids.u16.xz").write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
        (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
        manifest = {
            "name": args.out.name, "format": "little-endian uint16 token ids, xz-compressed; documents joined by [SEP]",
            "vocab_size": tok.get_vocab_size(), "sep_id": special_id(tok, "[SEP]"), "tokens": int(ids.size),
            "documents": len(texts), "ids_sha256": hashlib.sha256(raw).hexdigest(),
            "source": {"python": platform.python_version(), "implementation": platform.python_implementation(),
                       "bytes": total, "files": len(files),
                       "standard_library_files": counts.get("(standard library)", 0),
                       "max_bytes": args.max_bytes, "selection": "data=python's skips and fixed pseudo-random order "
                       "(SHA-1 of the path), the standard library and the installed packages of permissive licence",
                       "packages": [p for p in packages if p["kept"] and p["files"]],
                       "packages_left_out": [{k: p[k] for k in ("name", "version", "licence")}
                                             for p in packages if not p["kept"]]},
            "built_with": {"sigprop_builder": "bench/build_pinned_corpus.py", "argv": sys.argv[1:]},
        }
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        if args.out.exists():
            shutil.rmtree(args.out)
        shutil.move(str(folder), args.out)
    size = (args.out / "ids.u16.xz").stat().st_size
    print(f"wrote {args.out}: {ids.size} tokens, {size / 1e6:.1f} MB compressed, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
