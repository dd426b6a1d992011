"""Learned heads: one linear readout over every signal the routing function has.

A head maps a decision's signals to option logits, logits = bias + Σ blocks, with
probabilities = softmax(logits / temperature). Its blocks, each optional:

- `text`: TF-IDF word and character n-grams of the evidence the prompt carries (lexical.py);
- `categorical`: the item's structured fields the policy names (`channel=email`, `severity=sev2`);
- `sentence`: the evidence's sentence embedding (decision_router.sentences: what the words mean,
  in any of the encoder's languages, where TF-IDF sees only the words themselves);
- `hidden`: the model's final hidden state (a small model often represents the answer there
  while its letters cannot read it out);
- `letters`: the option letters' logits, centred, so a model whose letters are informative
  contributes its zero-shot answer.

A head may also carry `novelty` (optional): how unlike every option it learned an item's hidden
state is, so an item that belongs to none of them goes to review instead of being answered with
confidence (`Head.novelty`, judging.novelty_reasons; fitted by training/novelty.py).

A head is a versioned file beside its policy (`heads/<policy>.<question>.json`), referenced
from the policy by path and sha256 and validated when the policy loads (`make fit` writes both).
It is bound to what it was fitted on: the question's wording, options and evidence fields, and,
when it reads the model (hidden state or letters), the GGUF (sha256, hidden width) and the prompt
version, because another model's hidden state means something else. A head that reads the model
never applies to another model's: the routing function then falls back to the letters.

Pure Python on purpose (the sentence vector aside, which the encoder computes with numpy): the
fitter scores its folds with this same code, so both compute the same probabilities.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import operator
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

from pydantic import Discriminator, Field, StringConstraints, Tag, ValidationError, model_validator

from decision_contract import ModelInfo, softmax

from .. import sentences
from ..validation import StrictModel
from .lexical import State, categorical_features, evidence_text, term_counts, tfidf

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
FORMAT: Literal["decision-router-head/2"] = "decision-router-head/2"
#: A head file larger than this is refused: it is loaded by every Lambda container.
MAX_HEAD_BYTES = 2 * 1024 * 1024
#: The limit of a head with more options than the endpoint has letters (a weight row per option:
#: 150 intents over a help desk's vocabulary); make fit-history sizes its vocabulary to fit.
MAX_MANY_OPTIONS_HEAD_BYTES = 24 * 1024 * 1024
#: Options up to which a head is held to MAX_HEAD_BYTES (the endpoint's letters, A…P).
LETTERED_OPTIONS = 16


class HeadThresholds(StrictModel):
    """When the head's answer may route on its own (no letter mass check: a head does not read
    the letters' share of the vocabulary)."""

    min_confidence: Unit
    min_margin: Unit
    by_option: dict[str, Unit] = Field(
        default_factory=dict, description="A stricter min_confidence when the head answers this option (e.g. a low "
        "priority, where answering too low is the costly mistake); chosen out of fold by make fit.")

    def min_confidence_for(self, option_id: str) -> float:
        return max(self.min_confidence, self.by_option.get(option_id, 0.0))


class FitReport(StrictModel):
    """How the head was fitted, for the people who decide to trust it."""

    examples: int = Field(ge=1, description="Labelled decisions the head was fitted on.")
    sampled_from: int | None = Field(None, ge=1, description="Labelled decisions there were, when the head was "
                                     "fitted on a stratified sample of them (a large history).")
    fitted_on: date
    data: list[str] = Field(default_factory=list, description="Labelled sets used (files, split).")
    regularisation: float = Field(gt=0, description="Inverse L2 strength C, chosen by grouped cross-validation.")
    model_weight: float = Field(0.0, ge=0, description="Scale of the model's blocks against the lexical ones "
                                "(0: the model's signals did not help on held-out folds), chosen with C.")
    folds: int = Field(ge=2)
    cv_accuracy: Unit
    cv_ece: Unit
    letters_cv_accuracy: Unit | None = None
    text_only_cv_accuracy: Unit | None = None


class TextBlock(StrictModel):
    fields: list[str] = Field(min_length=1, description="State keys whose values are the text, in order.")
    word_ngrams: tuple[int, int] = (1, 2)
    char_ngrams: tuple[int, int] = (2, 5)
    terms: list[str] = Field(min_length=1, description="Vocabulary (w: word n-grams, c: character n-grams).")
    idf: list[float]
    weights: list[list[float]] = Field(description="One row per option, one weight per term.")


class CategoricalBlock(StrictModel):
    fields: list[str] = Field(min_length=1, description="State keys read as categories.")
    values: list[str] = Field(min_length=1, description="The `key=value` indicators the head knows.")
    weights: list[list[float]] = Field(description="One row per option, one weight per indicator.")


class SentenceBlock(StrictModel):
    encoder: Literal["use-multilingual-v3"] = Field(description="The sentence encoder whose vectors the weights read "
                                                    "(decision_router.sentences).")
    fields: list[str] = Field(min_length=1, description="State keys whose values are the text embedded, in order.")
    weights: list[list[float]] = Field(description="One row per option, one weight per embedding value.")

    @property
    def dimensions(self) -> int:
        return sentences.ENCODERS[self.encoder].dimensions


class VectorBlock(StrictModel):
    weights: list[list[float]] = Field(description="One row per option, one weight per input value.")


class NoveltyFigures(StrictModel):
    """What every novelty part carries beside its score: the surprise's weight, the threshold and
    what it was chosen for."""

    surprise_weight: float = Field(0.0, ge=0, description="The weight of the head's surprise, −ln of its top "
                                   "probability, added to the distance (0: the distance alone).")
    threshold: float = Field(gt=0, description="Scores above it go to review.")
    in_scope_budget: Unit = Field(description="The share of in-scope items the threshold was chosen to send to review.")
    out_of_fold_in_scope_review: Unit = Field(description="The share of training items above the threshold, out of fold.")
    out_of_scope_examples: int = Field(0, ge=0, description="Training items labelled as belonging to no option, scored.")
    out_of_scope_caught: Unit | None = Field(None, description="Their share above the threshold.")


class NearestNovelty(NoveltyFigures):
    """How far the evidence's sentence embedding is from what the head learned: the cosine
    distance to its `k` nearest training items (1 − their mean cosine similarity), the training
    items being `rows` of them kept in the file (a sample, each option's items in proportion,
    sized to the file's limit; each row as int8 values times its own scale, base64). Read in the head's sentence block's space (its
    encoder and fields). With `surprise_weight` w > 0 the score also counts the head's surprise,
    w · (−ln top probability), as the Mahalanobis part does."""

    score: Literal["nearest"] = "nearest"
    k: int = Field(ge=1, description="Nearest training items averaged.")
    rows: int = Field(ge=1, description="Training items kept.")
    index: str = Field(min_length=1, description="Their embeddings: rows × the encoder's width int8 values, base64.")
    scales: str = Field(min_length=1, description="Each row's scale: rows float32 values, little-endian, base64 (a "
                        "row is its int8 values times its scale).")

    @cached_property
    def matrix(self) -> Any:
        import numpy as np  # the vectors are numpy's (the encoder's) already

        values = np.frombuffer(base64.b64decode(self.index), dtype=np.int8).astype(np.float32).reshape(self.rows, -1)
        return values * np.frombuffer(base64.b64decode(self.scales), dtype="<f4")[:, None]

    def distance(self, sentence: Sequence[float]) -> float:
        import numpy as np

        return float(nearest_distance(self.matrix, np.asarray([sentence], dtype=np.float32), self.k)[0])


def nearest_distance(index: Any, vectors: Any, k: int) -> Any:
    """1 − the mean cosine similarity of each of `vectors` to its `k` nearest rows of `index`
    (unit vectors both: the dot product is the cosine), 1,024 vectors at a time: the one score the
    routing function (NearestNovelty.distance) and the fitter (training/novelty.py) compute."""
    import numpy as np

    k = min(k, len(index))
    out = np.zeros(len(vectors))
    for start in range(0, len(vectors), 1024):
        similarities = vectors[start:start + 1024] @ index.T
        nearest = np.partition(similarities, len(index) - k, axis=1)[:, len(index) - k:]
        out[start:start + 1024] = 1.0 - nearest.astype(np.float64).mean(axis=1)
    return out


class NoveltyBlock(NoveltyFigures):
    """The hidden state's class-conditional Mahalanobis distance with one shared (shrunk)
    covariance, in a reduced space: z = projection · (hidden − centre), the score is the distance
    from z to the nearest option's mean, sqrt(min_o |z − means[o]|²). The projection folds in the
    hidden state's standardisation, its principal directions and the covariance's whitening, so
    the score is a plain Euclidean distance there. An item scoring above `threshold` is unlike any
    option the head learned: it goes to review. With `surprise_weight` w > 0 the score also counts
    the head's own surprise at its answer, w · (−ln top probability): an item near no option's
    mean, or one the head cannot tell between options, scores high (the two signals catch
    different out-of-scope items; the weight is chosen when the head is fitted)."""

    score: Literal["mahalanobis"] = "mahalanobis"
    centre: list[float] = Field(min_length=1, description="The training hidden states' mean (hidden_size values).")
    projection: list[list[float]] = Field(min_length=1, description="One row per reduced dimension, hidden_size values each.")
    means: list[list[float]] = Field(description="One row per option: its mean in the reduced space (an option with no "
                                     "training item has none: an empty row).")


def _novelty_kind(value: Any) -> str:
    """A novelty part's kind: its `score` (a Mahalanobis part written before the key existed has none)."""
    if isinstance(value, dict):
        return str(value.get("score", "mahalanobis"))
    return str(getattr(value, "score", "mahalanobis"))


#: A head's novelty part, told apart by its `score`.
Novelty = Annotated[Annotated[NoveltyBlock, Tag("mahalanobis")] | Annotated[NearestNovelty, Tag("nearest")],
                    Discriminator(_novelty_kind)]


class Head(StrictModel):
    format: Literal["decision-router-head/2"] = FORMAT
    version: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    question_sha256: Sha256 = Field(description="Digest of the question's prompt inputs (see question_digest).")
    model_sha256: Sha256 | None = Field(None, description="SHA-256 of the GGUF the model blocks were fitted on.")
    hidden_size: int | None = Field(None, ge=1, description="Width of those hidden states.")
    prompt_version: str | None = None
    options: list[str] = Field(min_length=2, description="Option ids, in the order of every block's weight rows.")
    text: TextBlock | None = None
    categorical: CategoricalBlock | None = None
    sentence: SentenceBlock | None = Field(None, description="The evidence's sentence embedding (optional).")
    hidden: VectorBlock | None = None
    letters: VectorBlock | None = None
    novelty: Novelty | None = Field(
        None, description="Optional: how unlike everything it learned an item is (its sentence embedding's distance to "
        "the nearest training items, or its hidden state's to the options' means).")
    bias: list[float]
    temperature: float = Field(1.0, gt=0)
    thresholds: HeadThresholds
    fit: FitReport

    @model_validator(mode="after")
    def _shape(self) -> "Head":
        n = len(self.options)
        if len(self.bias) != n:
            raise ValueError(f"bias has {len(self.bias)} values for {n} options")
        widths = {"text": len(self.text.terms) if self.text else 0,
                  "categorical": len(self.categorical.values) if self.categorical else 0,
                  "sentence": self.sentence.dimensions if self.sentence else 0,
                  "hidden": self.hidden_size or 0, "letters": n}
        for name in widths:
            block = getattr(self, name)
            if block is None:
                continue
            if len(block.weights) != n:
                raise ValueError(f"{name}.weights has {len(block.weights)} rows for {n} options")
            for i, row in enumerate(block.weights):
                if len(row) != widths[name]:
                    raise ValueError(f"{name}.weights[{i}] has {len(row)} values; expected {widths[name]}")
        if self.text is not None and len(self.text.idf) != len(self.text.terms):
            raise ValueError(f"text.idf has {len(self.text.idf)} values for {len(self.text.terms)} terms")
        if self.novelty is not None:
            self._check_novelty(self.novelty, n)
        if self.reads_model and (self.model_sha256 is None or self.prompt_version is None):
            raise ValueError("a head that reads the hidden state or the letters names model_sha256 and prompt_version")
        if self.hidden is not None and self.hidden_size is None:
            raise ValueError("a head with a hidden block names hidden_size")
        if not any((self.text, self.categorical, self.sentence, self.hidden, self.letters)):
            raise ValueError("a head reads at least one block (text, categorical, sentence, hidden, letters)")
        unknown = sorted(set(self.thresholds.by_option) - set(self.options))
        if unknown:
            raise ValueError(f"thresholds.by_option names options {unknown} the head does not have")
        return self

    def _check_novelty(self, novelty: NoveltyBlock | NearestNovelty, n: int) -> None:
        if isinstance(novelty, NearestNovelty):
            if self.sentence is None:
                raise ValueError("novelty 'nearest' reads the sentence embedding: the head has a sentence block")
            try:
                values = len(base64.b64decode(novelty.index, validate=True))
                scales = len(base64.b64decode(novelty.scales, validate=True)) // 4
            except ValueError:
                raise ValueError("novelty.index and novelty.scales are base64") from None
            if values != novelty.rows * self.sentence.dimensions:
                raise ValueError(f"novelty.index holds {values} values; expected rows {novelty.rows} × "
                                 f"{self.sentence.dimensions}")
            if scales != novelty.rows:
                raise ValueError(f"novelty.scales holds {scales} values; expected rows {novelty.rows}")
            return
        if self.hidden_size is None or self.model_sha256 is None or self.prompt_version is None:
            raise ValueError("novelty reads the hidden state: the head names hidden_size, model_sha256 and prompt_version")
        if len(novelty.centre) != self.hidden_size:
            raise ValueError(f"novelty.centre has {len(novelty.centre)} values; expected hidden_size {self.hidden_size}")
        for i, row in enumerate(novelty.projection):
            if len(row) != self.hidden_size:
                raise ValueError(f"novelty.projection[{i}] has {len(row)} values; expected hidden_size {self.hidden_size}")
        if len(novelty.means) != n:
            raise ValueError(f"novelty.means has {len(novelty.means)} rows for {n} options")
        rank = len(novelty.projection)
        for i, row in enumerate(novelty.means):
            if row and len(row) != rank:
                raise ValueError(f"novelty.means[{i}] has {len(row)} values; expected {rank} (the projection's rows) or none")
        if not any(novelty.means):
            raise ValueError("novelty.means: no option has a mean")

    @property
    def reads_model(self) -> bool:
        return self.hidden is not None or self.letters is not None or self.reads_hidden_state

    @property
    def reads_hidden_state(self) -> bool:
        return self.hidden is not None or isinstance(self.novelty, NoveltyBlock)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {term: i for i, term in enumerate(self.text.terms)} if self.text else {}

    @cached_property
    def _text_columns(self) -> list[tuple[float, ...]]:
        return list(zip(*self.text.weights)) if self.text else []

    @cached_property
    def _categorical_columns(self) -> list[tuple[float, ...]]:
        return list(zip(*self.categorical.weights)) if self.categorical else []

    @cached_property
    def _categories(self) -> dict[str, int]:
        return {value: i for i, value in enumerate(self.categorical.values)} if self.categorical else {}

    def mismatch(self, model: ModelInfo | None, prompt_version: str | None) -> str | None:
        """Why this head must not read the endpoint's answer, or None when it may."""
        if not self.reads_model:
            return None
        if model is None:
            return "the endpoint reported no model"
        if model.sha256 != self.model_sha256:
            return f"endpoint model sha256 {model.sha256[:12]}… is not the head's {(self.model_sha256 or '')[:12]}…"
        if self.reads_hidden_state and model.hidden_size is not None and model.hidden_size != self.hidden_size:
            return f"endpoint hidden size {model.hidden_size} is not the head's {self.hidden_size}"
        if prompt_version != self.prompt_version:
            return f"endpoint prompt version {prompt_version!r} is not the head's {self.prompt_version!r}"
        return None

    def logits(self, state: State, hidden: Sequence[float] | None = None,
               letter_logits: Sequence[float] | None = None, sentence: Sequence[float] | None = None) -> list[float]:
        # Column by column (a term's weights for every option at once) and row sums done in C
        # (math.fsum over map): the same sums in the same order as a plain loop, a few times
        # faster, so a 150-option head costs the routing function about a millisecond or two.
        return self._add_model(self.lexical_logits(state, sentence), hidden, letter_logits)

    def sentence_vector(self, state: State) -> tuple[float, ...] | None:
        """The evidence's embedding this head reads (None: it reads none)."""
        if self.sentence is None:
            return None
        return sentences.embed(self.sentence.encoder, evidence_text(state, self.sentence.fields))

    def lexical_logits(self, state: State, sentence: Sequence[float] | None = None) -> list[float]:
        """The bias and the blocks read from the evidence (text, categories, its sentence
        embedding): what changes when an evidence field is left out (why.py). `sentence`: the
        evidence's embedding when the caller has it (the fitter, for many items at once)."""
        logits = list(self.bias)
        if self.sentence is not None:
            vector = sentence if sentence is not None else self.sentence_vector(state)
            assert vector is not None
            if len(vector) != self.sentence.dimensions:
                raise ValueError(f"sentence vector has {len(vector)} values; the head reads {self.sentence.dimensions}")
            logits = [z + math.fsum(map(operator.mul, row, vector)) for z, row in zip(logits, self.sentence.weights)]
        if self.text is not None:
            columns = self._text_columns
            for column, value in self.text_vector(state).items():
                logits = [z + w * value for z, w in zip(logits, columns[column])]
        if self.categorical is not None:
            for indicator in categorical_features(state, self.categorical.fields):
                found = self._categories.get(indicator)
                if found is not None:
                    logits = [z + w for z, w in zip(logits, self._categorical_columns[found])]
        return logits

    def text_vector(self, state: State) -> dict[int, float]:
        """The evidence's TF-IDF vector over the text block's vocabulary (column → value; empty
        when the head has no text block): what its text weights multiply."""
        if self.text is None:
            return {}
        counts = term_counts(evidence_text(state, self.text.fields), self.text.word_ngrams, self.text.char_ngrams)
        return tfidf(counts, self._index, self.text.idf)

    def indicator_logits(self, indicator: str) -> tuple[float, ...] | None:
        """The categorical block's weights (one per option) of a `key=value` indicator, or None
        when the head does not know it."""
        found = self._categories.get(indicator)
        return None if found is None else self._categorical_columns[found]

    def model_logits(self, hidden: Sequence[float] | None = None,
                     letter_logits: Sequence[float] | None = None) -> list[float]:
        """The blocks read from the model (hidden state, letters) alone, from zero."""
        return self._add_model([0.0] * len(self.options), hidden, letter_logits)

    def _add_model(self, logits: list[float], hidden: Sequence[float] | None,
                   letter_logits: Sequence[float] | None) -> list[float]:
        if self.hidden is not None:
            if hidden is None or len(hidden) != self.hidden_size:
                raise ValueError(f"hidden state has {len(hidden or [])} values; the head reads {self.hidden_size}")
            logits = [z + math.fsum(map(operator.mul, row, hidden)) for z, row in zip(logits, self.hidden.weights)]
        if self.letters is not None:
            if letter_logits is None or len(letter_logits) != len(self.options):
                raise ValueError(f"letter logits have {len(letter_logits or [])} values; the head reads {len(self.options)}")
            centred = centre(letter_logits)
            logits = list(logits)
            for o, row in enumerate(self.letters.weights):
                logits[o] += math.fsum(w * z for w, z in zip(row, centred))
        return logits

    def novelty_score(self, hidden: Sequence[float] | None, probabilities: Sequence[float] | None = None,
                      sentence: Sequence[float] | None = None) -> float | None:
        """How unlike everything it learned the item is, or None when the head has no novelty
        part; `probabilities`: the head's own, which a novelty part with a surprise weight reads;
        `hidden`: the model's hidden state (a Mahalanobis part reads it); `sentence`: the
        evidence's embedding (a nearest part reads it). Pure Python for the Mahalanobis part: 64
        rows over a 576-wide hidden state took about 2 ms a decision on a busy 2-core machine."""
        novelty = self.novelty
        if novelty is None:
            return None
        surprise = 0.0
        if novelty.surprise_weight > 0:
            if not probabilities:
                raise ValueError("this head's novelty reads its own probabilities: pass them")
            surprise = novelty.surprise_weight * -math.log(max(max(probabilities), 1e-300))
        if isinstance(novelty, NearestNovelty):
            if sentence is None:
                raise ValueError("this head's novelty reads the evidence's sentence embedding: pass it")
            return novelty.distance(sentence) + surprise
        if hidden is None:
            raise ValueError("this head's novelty reads the hidden state: pass it")
        if len(hidden) != len(novelty.centre):
            raise ValueError(f"hidden state has {len(hidden)} values; the head's novelty reads {len(novelty.centre)}")
        shifted = list(map(operator.sub, hidden, novelty.centre))
        z = [math.fsum(map(operator.mul, row, shifted)) for row in novelty.projection]
        nearest = min(math.fsum((a - b) ** 2 for a, b in zip(z, mean)) for mean in novelty.means if mean)
        return math.sqrt(nearest) + surprise

    def probabilities(self, state: State, hidden: Sequence[float] | None = None,
                      letter_logits: Sequence[float] | None = None, sentence: Sequence[float] | None = None) -> list[float]:
        """The head's calibrated probabilities, in `options` order."""
        return softmax(self.logits(state, hidden, letter_logits, sentence), self.temperature)


def centre(values: Sequence[float]) -> list[float]:
    """Letter logits less their mean: only their differences carry the model's answer."""
    mean = math.fsum(values) / len(values)
    return [v - mean for v in values]


class HeadFile(StrictModel):
    """A policy question's reference to its head file: the path (relative to the policy file) and
    the sha256 of its bytes, so a changed or missing file fails at load, naming the file."""

    file: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]+\.json$")]
    sha256: Sha256


def load_head(file: Path, sha256: str) -> Head:
    """Read and check a head file; ValueError names the file and what is wrong."""
    try:
        data = file.read_bytes()
    except OSError as error:
        raise ValueError(f"head file {file}: cannot read it ({error.strerror or error})") from None
    return read_head(data, sha256, f"head file {file}", "the file changed since make fit wrote the policy")


def read_head(data: bytes, sha256: str, where: str, changed: str = "the bytes are not the ones named",
              named_by: str = "the policy's") -> Head:
    """Check a head's bytes against the sha256 they are named by, and validate them: the one check
    for a head shipped beside its policy and a head promoted into the head store. ValueError says
    `where` and what is wrong (`named_by`: who named the digest; `changed`: why it would differ)."""
    if len(data) > MAX_MANY_OPTIONS_HEAD_BYTES:
        raise ValueError(f"{where}: {len(data)} bytes; at most {MAX_MANY_OPTIONS_HEAD_BYTES}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ValueError(f"{where}: sha256 {actual[:12]}… is not {named_by} {sha256[:12]}… ({changed})")
    try:
        head = Head.model_validate_json(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{where} is invalid: {problems}") from None
    if len(head.options) <= LETTERED_OPTIONS and len(data) > MAX_HEAD_BYTES:
        raise ValueError(f"{where}: {len(data)} bytes; at most {MAX_HEAD_BYTES} for a head of "
                         f"{len(head.options)} options (more are allowed only beyond {LETTERED_OPTIONS} options)")
    return head


def question_digest(question_text: str, options: Sequence[tuple[str, str]], state_keys: Sequence[str]) -> str:
    """What a head depends on besides the model: the question, its options (id, description, in
    order) and the evidence fields. Changing any of them means refitting."""
    payload = {"question": question_text, "options": [list(o) for o in options], "state": list(state_keys)}
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
