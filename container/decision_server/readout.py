"""THE readout: how a decision becomes a prompt, and which tokens are read out.

SemIf's direct-options method (`direct-options-v1`): the model's own chat
template with the generation prompt added and thinking disabled; a fixed system
instruction; a JSON user message with the evidence first (so a batch sharing one state
shares a token prefix); options lettered A…P by position, their ids never shown; the
final-position logits of the letter tokens are the answer. Invariants are checked once,
when the model loads, so a model whose letters are not single tokens never serves.

A decision may ask for the other layout (`criterion-first-v1`): the same instruction and the
same JSON members, the criterion and lettered options first and the evidence last, so that
decisions asking one criterion of many items share their prompt up to the evidence. The part
before the evidence is the prompt's `fixed_prefix`: the engine evaluates it once and keeps it
(a stem, cached across requests), and each item evaluates only its own tokens.

The maths of the answer is here too: what is read at a decision's last position
(`read_final_output`, kept by the prompt cache) and the option letters' logits and mass taken
from it (`letter_readout`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from decision_contract import LAYOUT_PROMPT_VERSIONS, OPTION_LETTERS, Decision, DecisionOption

from .errors import EngineFault
from .prompt_cache import FinalOutput

#: SemIf's name for this prompt, echoed in every result. The instruction and the user payload
#: below are SemIf's `direct-options-v1` to the byte: any other wording changes `prompt_sha256`
#: and the probabilities, and breaks parity with the AWS sample and with fitted heads.
PROMPT_VERSION = LAYOUT_PROMPT_VERSIONS["evidence-first"]
#: The criterion-first layout's name: its numbers differ from `direct-options-v1`'s (the model
#: reads the parts in another order), so heads fitted on one refuse the other's.
CRITERION_FIRST_VERSION = LAYOUT_PROMPT_VERSIONS["criterion-first"]

SYSTEM_INSTRUCTION = (
    "Apply the supplied criterion to the supplied evidence. Choose exactly one listed option. "
    "Respond with only its uppercase letter, with no explanation or reasoning."
)


class ReadoutError(RuntimeError):
    """The model cannot be read out by this method (checked at start-up)."""


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: list[int]
    sha256: str
    #: Leading tokens that do not depend on the evidence (criterion-first prompts; else 0).
    fixed_prefix: int = 0
    version: str = PROMPT_VERSION


def prompt_version(decision: Decision) -> str:
    """The name of the prompt a decision is rendered with (echoed in its result)."""
    return LAYOUT_PROMPT_VERSIONS[decision.layout]


def user_payload(decision: Decision) -> str:
    """The user message: evidence first, then the criterion, then lettered options; or, for a
    criterion-first decision, the criterion and lettered options, then the evidence."""
    options = [
        {"letter": letter, "description": option.description}
        for letter, option in zip(OPTION_LETTERS, decision.options)
    ]
    if decision.layout == "criterion-first":
        payload = {"criterion": decision.question, "options": options, "evidence": decision.state}
    else:
        payload = {"evidence": decision.state, "criterion": decision.question, "options": options}
    return json.dumps(payload, ensure_ascii=False)


def messages(decision: Decision) -> list[dict[str, str]]:
    """The chat messages of a decision: the fixed system instruction, then the user payload."""
    return [
        {"role": "system", "content": SYSTEM_INSTRUCTION},
        {"role": "user", "content": user_payload(decision)},
    ]


class Readout:
    """Renders decisions with the model's chat template and knows the letter tokens."""

    def __init__(
        self,
        chat_template: str,
        *,
        bos_token: str,
        eos_token: str,
        tokenize: Callable[[str], list[int]],
        token_text: Callable[[int], str],
    ) -> None:
        # llama-cpp-python's own formatter: the jinja2 sandbox, filters and globals it uses
        # for chat completions, so decisions and chat see the template rendered the same way.
        self._formatter = Jinja2ChatFormatter(
            template=chat_template, eos_token=eos_token, bos_token=bos_token, add_generation_prompt=True
        )
        self._tokenize = tokenize
        self._criterion_prefixes: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self.letter_token_ids: list[int] = self._check_letters(token_text)

    def render(self, decision: Decision) -> str:
        return self._formatter(messages=messages(decision), enable_thinking=False).prompt

    def prompt(self, decision: Decision) -> Prompt:
        text = self.render(decision)
        tokens = self._tokenize(text)
        fixed = 0
        if decision.layout == "criterion-first":
            fixed = longest_common_prefix([self._criterion_prefix(decision), tokens])
        return Prompt(text=text, tokens=tokens, sha256=hashlib.sha256(text.encode()).hexdigest(),
                      fixed_prefix=fixed, version=prompt_version(decision))

    def _criterion_prefix(self, decision: Decision) -> list[int]:
        """The tokens every criterion-first prompt of this criterion and these options starts
        with, whatever its evidence: the common prefix of probe prompts whose states differ from
        their first character on (text, object, array), kept for the criteria asked recently."""
        key = json.dumps([decision.question, [o.description for o in decision.options]], ensure_ascii=False)
        with self._lock:  # requests are rendered on their own threads
            cached = self._criterion_prefixes.pop(key, None)
            if cached is not None:
                self._criterion_prefixes[key] = cached  # the most recent last
                return cached
        probes = [self._tokenize(self.render(decision.model_copy(update={"state": state}))) for state in PROBE_STATES]
        cached = probes[0][: longest_common_prefix(probes)]
        with self._lock:
            self._criterion_prefixes[key] = cached
            while len(self._criterion_prefixes) > CRITERION_PREFIXES_KEPT:
                del self._criterion_prefixes[next(iter(self._criterion_prefixes))]
        return cached

    def _check_letters(self, token_text: Callable[[int], str]) -> list[int]:
        ids = []
        for letter in OPTION_LETTERS:
            tokens = self._tokenize(letter)
            if len(tokens) != 1 or token_text(tokens[0]) != letter:
                raise ReadoutError(
                    f"letter {letter!r} is not one token that decodes to itself (got {tokens}); "
                    "this model cannot be read out by option letters"
                )
            ids.append(tokens[0])
        # The answer position: appending a letter to a rendered prompt must add exactly that
        # one token, or the logits read at the final position would not be the letter's.
        probe = self.render(PROBE)
        probe_tokens = self._tokenize(probe)
        for letter, token in zip(OPTION_LETTERS, ids):
            if self._tokenize(probe + letter) != probe_tokens + [token]:
                raise ReadoutError(
                    f"appending {letter!r} to a rendered prompt does not add exactly its one token; "
                    "the chat template's generation prompt does not end at a token boundary"
                )
        return ids


#: States that differ from their first character on, in each JSON shape a state may take.
PROBE_STATES: tuple[Any, ...] = ("a", "z", {"a": 1}, ["a"])
#: Criteria whose evidence-free prefix is kept (a few hundred tokens each).
CRITERION_PREFIXES_KEPT = 64

PROBE = Decision(
    id="readout-probe",
    state={"note": "start-up check of the letter tokens"},
    question="Which option applies?",
    options=[DecisionOption(id=f"o{i}", description=f"option {i}") for i in range(len(OPTION_LETTERS))],
)


class ControlTokens:
    """Finds the model's control-token texts (e.g. `<|im_start|>`) in caller-supplied JSON,
    so that no field can forge a chat turn once the prompt is tokenized with specials on."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = sorted({t for t in texts if t}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, self.texts))) if self.texts else None

    def find(self, value: Any, path: str = "body") -> tuple[str, str] | None:
        """(JSON path, token text) of the first control token in any string or key, or None."""
        if self._pattern is None:
            return None
        stack: list[tuple[str, Any]] = [(path, value)]
        while stack:
            where, item = stack.pop()
            if isinstance(item, str):
                match = self._pattern.search(item)
                if match:
                    return where, match.group(0)
            elif isinstance(item, dict):
                for key, child in reversed(list(item.items())):
                    key_text = str(key)
                    match = self._pattern.search(key_text)
                    if match:
                        return f"{where} (key {key_text!r})", match.group(0)
                    stack.append((f"{where}.{key_text}", child))
            elif isinstance(item, (list, tuple)):
                stack.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))
        return None


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all sequences share."""
    if not sequences:
        return 0
    shortest = min(len(s) for s in sequences)
    first = sequences[0]
    for i in range(shortest):
        token = first[i]
        if any(s[i] != token for s in sequences[1:]):
            return i
    return shortest


def read_final_output(row: np.ndarray, letter_ids: Sequence[int], hidden: np.ndarray | None) -> FinalOutput:
    """The letter logits at a position (every option letter's), the log-sum-exp of the whole
    vocabulary's and its argmax. The one full-vocabulary temporary is the shifted exponent."""
    letters = row[list(letter_ids)].astype(np.float64)
    argmax = int(row.argmax())
    peak = float(row[argmax])
    shifted = row - np.float32(peak)
    np.exp(shifted, out=shifted)
    lse_vocab = peak + math.log(float(shifted.sum(dtype=np.float64)))
    return FinalOutput(letters, lse_vocab, argmax, hidden)


def letter_readout(final: FinalOutput, n_options: int) -> tuple[list[float], float]:
    """The first `n_options` letters' logits and the share of next-token mass on them."""
    letters = final.letter_logits[:n_options]
    if not np.all(np.isfinite(letters)):
        raise EngineFault("the model produced non-finite letter logits")
    top = float(letters.max())
    lse_letters = top + math.log(float(np.exp(letters - top).sum()))
    return letters.tolist(), min(1.0, math.exp(lse_letters - final.lse_vocab))
