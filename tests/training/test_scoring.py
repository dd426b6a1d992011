"""The one scorer (training/scoring.py) on its four back-ends: the batch scorer's command in a child
process (the commands' default; its `model` tests on the embedded model), the batch scorer on an
engine in this process, one request an item to a runner (a decision server over HTTP, an
endpoint), and one SageMaker Processing job; each fills only what the signals store lacks, and names what it could not score
by the position of the decision asked, never dropping it. And `make fit`'s and relearning's use
of it (training/features.py): a row not scored named by its case, the examples from the store."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from decision_contract import Decision, DecisionResult, ModelInfo
from decision_contract.signals import SHARD_SUFFIX, request_key
from decision_router.domain.model_requests import SIGNAL_OPTIONS
from decision_server.batch import score_folder
from decision_server.errors import BadRequest
from decision_server.model_files import describe, embedded_model_path
from evaluation.cases import Case, Labelled
from evaluation.runners import RunFailure, Scored
from training.features import examples_of, score_cases
from training.scoring import (
    BatchScorerFailed,
    InProcessScoring,
    LocalBatchScoring,
    NotScored,
    RunnerScoring,
    SageMakerBatchScoring,
    scorer_for,
)
from training.signals_store import SignalsStore

MODEL = ModelInfo(file="m.gguf", bytes=1, sha256="c" * 64, context_size=2048, threads=1, gpu_layers=0,
                  llama_cpp_python_version="test", hidden_size=3)
REFUSED = "Ticket refused"


def decision(i: int) -> Decision:
    return Decision(id=f"d-{i}", state=REFUSED if i == 3 else f"Ticket {i}", question="Which team?",
                    options=[{"id": "Billing", "description": "billing"}, {"id": "Access", "description": "access"}],
                    return_hidden_state=True)


def answer(d: Decision, model: ModelInfo = MODEL) -> DecisionResult:
    n = float(d.state.split()[-1]) if d.state != REFUSED else -1.0
    return DecisionResult(id=d.id, option_ids=d.option_ids, probabilities=[0.5, 0.5], option_logits=[n, -n],
                          temperature=1.0, input_tokens=1, allowed_token_mass=0.5, prompt_sha256="0" * 64,
                          prompt_version="direct-options-v1", model=model,
                          timing={"tokenize_seconds": 0, "prefill_seconds": 0, "total_seconds": 0},
                          hidden_state=[n, 1.0, -1.0])


class Engine:
    """What the batch scorer reads of an engine: decision 3 is refused as a bad request."""

    settings = SimpleNamespace(parallel_sequences=2)
    scheduler = SimpleNamespace(queue_size=4)
    model_info = MODEL

    def __init__(self) -> None:
        self.asked: list[str] = []

    def submit_decisions(self, decisions, field):
        (d,) = decisions
        if d.state == REFUSED:
            raise BadRequest("decision.state: refused here")
        self.asked.append(d.state)
        future: Future = Future()
        future.set_result(SimpleNamespace(results=[answer(d)]))
        return SimpleNamespace(future=future)


class Runner:
    """A decision server one request at a time: decision 3 fails, decision 5 comes from another model."""

    description = "a decision server"

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.requests: list[list[str]] = []

    def decide(self, decisions):
        self.requests.append([d.id for d in decisions])
        self.asked += [d.state for d in decisions]
        if any(d.state == REFUSED for d in decisions):
            raise RunFailure("HTTP 400: refused here")
        return Scored([answer(d, MODEL.model_copy(update={"sha256": "e" * 64}) if d.id == "d-5" else MODEL)
                       for d in decisions], 0.0)


def keyed(n: int) -> tuple[list[Decision], list[str]]:
    decisions = [decision(i) for i in range(n)]
    return decisions, [request_key(MODEL.sha256, d) for d in decisions]


def test_the_batch_scorer_in_process_scores_only_what_the_store_lacks_and_names_the_refused(tmp_path):
    decisions, keys = keyed(6)
    store = SignalsStore(tmp_path / "store")
    store.put(keys[1], answer(decisions[1]))
    engine = Engine()
    scorer = InProcessScoring(engine, lambda text: None, chunk=2)
    not_scored = scorer.score_missing(store, decisions, keys, what="DATA")
    assert sorted(engine.asked) == ["Ticket 0", "Ticket 2", "Ticket 4", "Ticket 5"]  # 1 was held, 3 refused
    assert not_scored == [NotScored(3, "decision.state: refused here")]
    assert store.missing(keys) == [3]
    assert [float(z[0]) for z in store.gather([keys[5], keys[0]]).logits] == [5.0, 0.0]
    assert scorer.score_missing(store, decisions[:3], keys[:3], what="DATA") == [] and len(engine.asked) == 4


def test_one_request_an_item_names_a_failure_and_an_answer_of_another_model(tmp_path):
    decisions, keys = keyed(6)
    store = SignalsStore(tmp_path / "store")
    store.put(keys[0], answer(decisions[0]))
    runner = Runner()
    not_scored = RunnerScoring(runner, MODEL, progress=False).score_missing(store, decisions, keys, what="TEST")
    assert sorted(runner.asked) == [f"Ticket {i}" for i in (1, 2, 4, 5)] + [REFUSED]
    assert not_scored == [NotScored(3, "HTTP 400: refused here"),
                          NotScored(5, "the endpoint returned no hidden state, or another model answered")]
    assert store.missing(keys) == [3, 5]
    assert SignalsStore(tmp_path / "store").missing(keys) == [3, 5]  # saved as it went


def test_the_questions_about_one_item_go_in_one_request_so_an_endpoint_is_called_once_an_item(tmp_path):
    questions = ["Which team?", "Which priority?", "Which product?"]
    decisions = [decision(i).model_copy(update={"id": f"d-{i}-{q}", "question": q}) for i in (0, 1, 2) for q in questions]
    keys = [request_key(MODEL.sha256, d) for d in decisions]
    store = SignalsStore(tmp_path / "store")
    store.put(keys[4], answer(decisions[4]))  # item 1's second question is held already
    runner = Runner()
    scorer = RunnerScoring(runner, MODEL, progress=False, per_request=2)
    assert scorer.score_missing(store, decisions, keys, what="DATA") == []
    assert sorted(runner.requests) == sorted([["d-0-Which team?", "d-0-Which priority?"], ["d-0-Which product?"],
                                              ["d-1-Which team?", "d-1-Which product?"],
                                              ["d-2-Which team?", "d-2-Which priority?"], ["d-2-Which product?"]])
    assert store.missing(keys) == []


def test_the_batch_scorer_is_chosen_where_the_runner_holds_the_engine():
    assert isinstance(scorer_for(SimpleNamespace(engine=Engine()), MODEL, print), InProcessScoring)
    assert isinstance(scorer_for(Runner(), MODEL, print), RunnerScoring)


class Job:
    """A SageMaker Processing job, run here by the image's batch scorer."""

    def __init__(self) -> None:
        self.lines = 0

    def run(self, inputs: Path, outputs: Path, *, yes: bool) -> ModelInfo:
        assert yes
        self.lines = sum(len(p.read_text().splitlines()) for p in inputs.glob("part-*.jsonl"))
        score_folder(Engine(), inputs, outputs, log=lambda text: None)
        return MODEL


def test_one_sagemaker_job_scores_each_distinct_decision_once_into_the_store_of_its_model(tmp_path):
    decisions = [decision(i) for i in (0, 1, 2, 3, 4)] + [decision(1).model_copy(update={"id": "again"}), decision(3)]
    job = Job()
    model, store, not_scored = SageMakerBatchScoring(job, instances=2, yes=True).score_all(
        decisions, lambda sha256: SignalsStore(tmp_path / sha256))
    assert model == MODEL and job.lines == 5  # the same question asked twice is scored once
    assert not_scored == [NotScored(3, "decision.state: refused here")]
    keys = [request_key(MODEL.sha256, d) for d in decisions]
    assert store.missing(keys) == [3]
    assert len(list((tmp_path / MODEL.sha256).glob(f"*{SHARD_SUFFIX}"))) == 2  # one shard an instance, moved in


def case(i: int, line: int) -> Case:
    return Case(source="labels.jsonl", line=line, case_id=f"c-{i}", kind="policy", family="support-ticket",
                decisions=[Labelled("team", decision(i).model_copy(update={"return_hidden_state": False}), "Access")],
                formulas={})


def test_make_fit_names_a_case_it_could_not_score_and_builds_examples_from_the_store(tmp_path):
    cases = [case(i, 10 + i) for i in range(5)]
    store = SignalsStore(tmp_path / "store")
    failures = score_cases(InProcessScoring(Engine(), lambda text: None), store, MODEL.sha256, cases)
    assert [(f.source, f.line) for f in failures] == [("labels.jsonl", 13)] and "refused here" in str(failures[0])
    examples = examples_of(SignalsStore(tmp_path / "store"), MODEL.sha256, cases)
    assert [e.case_id for e in examples] == ["c-0", "c-1", "c-2", "c-4"]
    assert examples[2].hidden.dtype == np.float64 and list(examples[2].hidden) == [2.0, 1.0, -1.0]
    assert list(examples[2].letter_logits) == [2.0, -2.0] and examples[2].gold == 1


# ------------------------------------------------------------------------ the batch scorer in a child process
@pytest.mark.server
def test_a_model_that_is_no_file_stops_the_child_and_the_error_names_its_status_and_its_words(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(BatchScorerFailed) as failed:
        LocalBatchScoring(lambda text: None, model_file=missing).describe()
    message = str(failed.value)
    assert message.startswith(f"the batch scorer (python -m decision_server.batch --describe --model-file {missing}) "
                              "exited with status 2; its last lines on stderr:\n")
    assert message.endswith(f"decision-server batch: error: argument --model-file: {missing} is not a file")


@pytest.mark.server
def test_a_child_that_fails_while_scoring_names_its_status_and_adopts_nothing(tmp_path):
    """A file that is no GGUF: the child exits 2 saying why, and the store is left as it was."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    scorer = LocalBatchScoring(lambda text: None, model_file=broken, model=MODEL)  # as if described before
    decisions, keys = keyed(2)
    store = SignalsStore(tmp_path / "store")
    with pytest.raises(BatchScorerFailed, match=r"exited with status 2; its last lines on stderr:\n(.|\n)*"
                                                r"decision-server batch: the model cannot load: "):
        scorer.score_missing(store, decisions, keys, what="DATA")
    assert store.missing(keys) == [0, 1] and not (tmp_path / "store").exists()


@pytest.mark.server
def test_make_fit_stops_with_the_child_s_words_when_its_model_is_no_file(tmp_path, capsys):
    from training import __main__ as make_fit

    code = make_fit.main(["--model", str(tmp_path / "missing.gguf"), "--cache", str(tmp_path / "cache"),
                          "--out", str(tmp_path / "out"), "--dry-run", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("python -m training: the batch scorer (python -m decision_server.batch --describe")
    assert "is not a file" in err and not (tmp_path / "out").exists()


def model_decision(i: int, state: str | None = None) -> Decision:
    return Decision(id=f"m-{i}", state=state or f"Ticket {i}: my new card has not arrived after {i + 3} days.",
                    question="Which banking topic is this message about?", options=list(SIGNAL_OPTIONS),
                    return_hidden_state=True)


@pytest.mark.model
@pytest.mark.server
def test_the_batch_scorer_in_a_child_process_scores_what_the_store_lacks_with_the_embedded_model(tmp_path):
    """Five decisions, one held already and one too long for the model, two a run: the child loads
    the embedded model (no engine in this process), its rows join the store as each run ends, its
    log reaches `say`, and the line it could not score comes back named."""
    sha256 = describe(embedded_model_path()).sha256
    said: list[str] = []
    scorer = LocalBatchScoring(said.append, chunk=2)
    model = scorer.describe()
    assert (model.sha256, model.file, model.hidden_size) == (sha256, embedded_model_path().name, 576)
    decisions = [model_decision(0), model_decision(1), model_decision(2, "word " * 6000), model_decision(3),
                 model_decision(4)]
    keys = [request_key(sha256, d) for d in decisions]
    store = SignalsStore(tmp_path / "store")
    store.put(keys[1], answer(decision(1), model).model_copy(update={"hidden_state": [0.5] * 576}))  # held already
    not_scored = scorer.score_missing(store, decisions, keys, what="DATA")
    assert len(not_scored) == 1 and not_scored[0].index == 2
    assert not_scored[0].reason.startswith("decision: the prompt is ") and "DECISION_MAX_PROMPT_TOKENS" in not_scored[0].reason
    assert store.missing(keys) == [2]
    hidden = store.gather([keys[0], keys[3], keys[4]]).hidden
    assert hidden.shape == (3, 576) and np.isfinite(hidden.astype(np.float64)).all()
    assert sum(line.startswith("scoring DATA: 4 items (1 cached), 2 a shard, by the batch scorer in a child process") for line in said) == 1
    assert sum("done: 1 shards scored, 0 skipped" in line for line in said) == 2  # the child's own log, two runs
    assert scorer.startup_seconds > 0  # its model load, apart from the scoring's rate
    # a GGUF named by its path, and the threads, reach the child's engine
    assert LocalBatchScoring(said.append, model_file=embedded_model_path(), threads=1).describe() == model.model_copy(
        update={"threads": 1})
