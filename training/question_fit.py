"""`make fit`'s view of one policy question's head: the head fitted by the one head fitter
(training/head_fit.py), judged on its out-of-fold folds against the alternatives, side by side:

- the letters, as production uses them (a temperature fitted on the training folds);
- the text-only classifier a user would compare us with: TF-IDF (word 1-2-grams and character
  2-5-grams, sublinear tf) + logistic regression (C=10), as evaluation/text_classifier.py fits it;
- the hidden-state-only head (the readout before the lexical blocks), at the head's HEAD_C.

Where a question protects options from under-assignment (priority), how often a protected gold
answer is auto-assigned a later option at the thresholds chosen; whether the head beats
always-the-commonest-answer; and, if asked, the learning curve of each readout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from scipy.stats import binomtest
from threadpoolctl import threadpool_limits

from evaluation import metrics

from . import head_fit, learn
from .thresholds import OutOfFoldReadout, Targets, threshold_readout, under_assigned

#: A head that does not beat always-the-commonest-answer at this significance is not shipped.
CHANCE_ALPHA = 0.01
#: Learning-curve sizes (plus every training example), as a user's history grows.
CURVE_SIZES = (25, 50, 100, 200, 400)
#: The hidden-state-only comparison's regularisation: the one the head's choice starts from.
HIDDEN_C = head_fit.HEAD_C


@dataclass
class QuestionFit:
    name: str
    option_ids: list[str]
    fitted: head_fit.FittedHead
    letters_temperature: float  # fitted on every training row: what production would use
    hidden_only: OutOfFoldReadout  # the hidden-state head
    hidden_temperature: float
    under_assignment: dict[str, Any] | None
    chance_rate: float
    beats_chance: bool
    learning_curve: list[dict] = field(default_factory=list)

    @property
    def signals(self) -> learn.Signals:
        return self.fitted.rows.s

    @property
    def n_train(self) -> int:
        return len(self.signals)

    @property
    def folds(self) -> int:
        return len(self.fitted.rows.parts)

    @property
    def regularisation(self) -> float:
        return self.fitted.choice.head_C

    @property
    def model_weight(self) -> float:
        return self.fitted.choice.weight

    @property
    def temperature(self) -> float:
        return self.fitted.oof.temperature

    @property
    def head(self) -> OutOfFoldReadout:
        """The combined readout, out of fold."""
        return self.fitted.oof.readout

    @property
    def letters(self) -> OutOfFoldReadout:
        if self.fitted.letters is None:
            raise ValueError(f"{self.name}: its signals have no letter logit per option to compare the head with")
        return self.fitted.letters

    @property
    def text_only(self) -> OutOfFoldReadout:
        """The TF-IDF + logistic regression baseline."""
        return self.fitted.text_only

    @property
    def linear(self) -> learn.Linear:
        return self.fitted.linear

    @property
    def targets(self) -> Targets:
        return self.fitted.targets

    @property
    def formula(self) -> str:
        return self.fitted.formula

    def text_only_test(self, test: learn.Signals) -> np.ndarray:
        """The text-only classifier fitted on every training row, on other rows."""
        return learn.baseline_probabilities(self.signals, range(self.n_train), range(len(test)), len(self.option_ids), test)

    def hidden_only_test(self, test: learn.Signals) -> np.ndarray:
        """The hidden-state head fitted on every training row, on other rows."""
        linear = learn.fit_linear(self.signals, range(self.n_train), len(self.option_ids), HIDDEN_C, 1.0, use_text=False)
        return np.array(learn.softmax_rows(learn.numpy_logits(linear, test, range(len(test))), self.hidden_temperature))

    @property
    def head_wins(self) -> bool:
        return (self.beats_chance and self.head.accuracy > self.letters.accuracy
                and self.head.log_loss < self.letters.log_loss)

    @property
    def overtakes_letters_at(self) -> int | None:
        """The fewest labelled examples on the learning curve at which the head beats the letters."""
        return next((p["examples"] for p in self.learning_curve if p["head"]["accuracy"] > p["letters"]["accuracy"]), None)


def fit_question(name: str, option_ids: list[str], s: learn.Signals, *, formula: str, folds: int, seed: int,
                 targets: Targets, curve: bool = True, say: Callable[[str], None] = lambda text: None) -> QuestionFit:
    """The question's head by the one head fitter, and the alternatives on its folds."""
    k = len(option_ids)
    fitted = head_fit.fit(s, k, seed=seed, formula=formula, targets=targets, folds=folds, say=say)
    parts, gold = fitted.rows.parts, fitted.gold
    with threadpool_limits(limits=1, user_api="blas"):
        hidden_oof = np.vstack([learn.numpy_logits(learn.fit_linear(s, fitted.rows.train_of(part), k, HIDDEN_C, 1.0,
                                                                    use_text=False), s, part) for part in parts])
    hidden_temperature = metrics.fit_temperature(list(hidden_oof), list(gold)).temperature
    hidden_only = threshold_readout(learn.softmax_rows(hidden_oof, hidden_temperature), gold, formula, targets.max_error,
                        targets.min_auto_routed)
    head = fitted.oof.readout
    under = None
    if fitted.option_minimums is not None:
        under = _under_assignment_report(head.probabilities, gold, formula, head.min_confidence, fitted.option_minimums,
                                         targets)
    chance = np.bincount(s.gold, minlength=k).max() / len(s)
    hits = int(round(head.accuracy * len(gold)))
    fit = QuestionFit(
        name=name, option_ids=option_ids, fitted=fitted,
        letters_temperature=metrics.fit_temperature(list(s.letters), list(s.gold)).temperature,
        hidden_only=hidden_only, hidden_temperature=hidden_temperature, under_assignment=under,
        chance_rate=float(chance), beats_chance=binomtest(hits, len(gold), chance, alternative="greater").pvalue < CHANCE_ALPHA)
    if curve:
        with threadpool_limits(limits=1, user_api="blas"):
            fit.learning_curve = learning_curve(s, k, parts, fitted.choice.head_C, fitted.choice.weight, formula, targets,
                                                seed)
    return fit


def _under_assignment_report(probabilities: list[np.ndarray], gold: np.ndarray, formula: str, floor: float | None,
                             per_option: dict[int, float], targets: Targets) -> dict[str, Any]:
    P = np.array(probabilities)
    predicted, conf = P.argmax(axis=1), metrics.confidences(probabilities, formula)
    minimum = np.array([max(floor if floor is not None else 1.0, per_option.get(int(p), 0.0)) for p in predicted])
    auto = conf >= minimum
    protected = np.isin(gold, list(targets.protected))
    under = under_assigned(predicted, gold, targets.protected) & auto
    return {"protected_gold": int(protected.sum()), "auto_assigned_lower": int(under.sum()),
            "rate": float(under.sum() / max(1, protected.sum())), "auto_share": float(auto.mean()),
            "auto_accuracy": float((predicted[auto] == gold[auto]).mean()) if auto.any() else None}


def learning_curve(s: learn.Signals, k: int, parts: Sequence[np.ndarray], C: float, model_weight: float, formula: str,
                   targets: Targets, seed: int, repeats: int = 2) -> list[dict]:
    """Out-of-fold accuracy, and the share auto-routed at the target error, of each readout
    against the number of labelled examples (seeded subsamples of each training fold)."""
    n = len(s)
    largest = min(n - len(p) for p in parts)
    sizes = sorted({size for size in CURVE_SIZES if size < largest} | {largest})
    points = []
    for size in sizes:
        results: dict[str, list[tuple[float, float]]] = {"letters": [], "text_only": [], "hidden_only": [], "head": []}
        for repeat in range(repeats if size < largest else 1):
            rng = np.random.default_rng(seed + repeat)
            outs = {name: np.zeros((n, k)) for name in results}
            for part in parts:
                train = np.setdiff1d(np.arange(n), part)
                if size < len(train):
                    train = np.sort(rng.choice(train, size=size, replace=False))
                t = metrics.fit_temperature(list(s.letters[train]), list(s.gold[train])).temperature
                outs["letters"][part] = np.array(learn.softmax_rows(s.letters[part], t))
                outs["text_only"][part] = learn.baseline_probabilities(s, train, part, k)
                outs["hidden_only"][part] = np.array(learn.softmax_rows(
                    learn.numpy_logits(learn.fit_linear(s, train, k, HIDDEN_C, 1.0, use_text=False), s, part)))
                outs["head"][part] = np.array(learn.softmax_rows(
                    learn.numpy_logits(learn.fit_linear(s, train, k, C, model_weight), s, part)))
            for name, probabilities in outs.items():
                readout = threshold_readout(list(probabilities), s.gold, formula, targets.max_error, min_auto_routed=1)
                results[name].append((readout.accuracy, readout.auto_routed_share))
        points.append({"examples": int(size), **{name: {"accuracy": float(np.mean([a for a, _ in r])),
                                                       "auto_routed_share": float(np.mean([b for _, b in r]))}
                                               for name, r in results.items()}})
    return points
