"""The batch scorer (decision_server.batch): input shards in, signals shards out, by SageMaker
Processing's folders. The fast tier tests its pure parts; the `model` tests score folders on the
embedded model and hold the rows to the engine's own answers."""

from __future__ import annotations

import io
import json
import logging
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest

from bench.engine_questions import QUESTIONS
from decision_contract import Decision
from decision_contract.signals import read_shard, request_key, write_shard
from decision_router.domain.model_requests import SIGNAL_OPTIONS
from decision_server import batch
from decision_server.__main__ import main as server_main
from decision_server.model_files import ModelFileError

MODEL = "ab" * 32


@pytest.fixture(autouse=True)
def root_logging_restored():
    """The command configures the root logger onto the sys.stdout of its call (pytest's capture
    here, closed after the test): put the process's logging back, or a later test's log line
    fails to write."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def decision(i: int = 0, **changes) -> Decision:
    fields = {"id": f"d-{i}", "state": f"Ticket {i}: my new card has not arrived after {i + 3} days.",
              "question": "Which banking topic is this message about?", "options": list(SIGNAL_OPTIONS),
              "return_hidden_state": True}
    return Decision(**{**fields, **changes})


# ------------------------------------------------------------------------------------ reading lines
def errors_of(tmp_path: Path, lines: list[str]) -> list[tuple[int, str]]:
    path = tmp_path / "part-00000.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    decisions, errors = batch.read_decisions(path)
    return [(e.line, e.reason) for e in errors]


def test_lines_become_decisions_numbered_from_one_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "part-00000.jsonl"
    path.write_text(decision(0).model_dump_json() + "\n\n" + decision(1).model_dump_json() + "\n   \n")
    decisions, errors = batch.read_decisions(path)
    assert [(n, d.id) for n, d in decisions] == [(1, "d-0"), (3, "d-1")] and errors == []
    assert batch.count_lines(path) == 2


def test_a_line_that_is_not_json_is_reported_with_where_it_breaks(tmp_path):
    assert errors_of(tmp_path, [decision().model_dump_json(), '{"id": "x", state}']) == [
        (2, "the line is not valid JSON: Expecting property name enclosed in double quotes at column 13")]


@pytest.mark.parametrize(("line", "reason"), [
    ('{"id": "x", "state": NaN}', "the line's JSON: NaN is not valid JSON (numbers must be finite)"),
    ('{"id": "x", "id": "y"}', "the line's JSON: duplicate key 'id' in one object"),
    ('[1, 2]', "decision: Input should be a valid dictionary or instance of Decision"),
])
def test_json_the_http_path_refuses_is_refused_here_too(tmp_path, line, reason):
    assert errors_of(tmp_path, [line]) == [(1, reason)]


def test_a_decision_that_breaks_the_schema_names_the_field_and_why(tmp_path):
    one_option = decision().model_dump(mode="json") | {"options": [{"id": "a", "description": "A"}]}
    no_question = {k: v for k, v in decision().model_dump(mode="json").items() if k != "question"}
    unknown = decision().model_dump(mode="json") | {"priority": 3}
    blank_option = decision().model_dump(mode="json") | {"options": [{"id": "", "description": "A"}, {"id": "b", "description": "B"}]}
    errors = errors_of(tmp_path, [json.dumps(x) for x in (one_option, no_question, unknown, blank_option)])
    assert errors == [
        (1, "decision.options: List should have at least 2 items after validation, not 1"),
        (2, "decision.question: Field required"),
        (3, "decision.priority: Extra inputs are not permitted"),
        (4, "decision.options[0].id: String should have at least 1 character"),
    ]


def test_an_error_record_is_one_json_line():
    assert json.loads(batch.LineError(7, "decision.question: Field required").to_json()) == {
        "line": 7, "reason": "decision.question: Field required"}


def test_the_errors_file_is_written_in_line_order_and_removed_when_a_rerun_has_none(tmp_path):
    path = tmp_path / "part-00000.errors.jsonl"
    batch.write_errors(path, [batch.LineError(9, "b"), batch.LineError(2, "a")])
    assert [json.loads(line)["line"] for line in path.read_text().splitlines()] == [2, 9]
    batch.write_errors(path, [])
    assert not path.exists() and not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------ writing inputs
def test_write_inputs_splits_evenly_in_a_stable_order(tmp_path):
    decisions = [decision(i) for i in range(10)]
    paths = batch.write_inputs(decisions, tmp_path, 3)
    assert [p.name for p in paths] == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    read = [batch.read_decisions(p)[0] for p in paths]
    assert [len(r) for r in read] == [3, 3, 4]
    assert [d for r in read for _, d in r] == decisions
    assert batch.input_shards(tmp_path) == paths


def test_write_inputs_writes_no_empty_shard_and_replaces_earlier_parts(tmp_path):
    batch.write_inputs([decision(i) for i in range(5)], tmp_path, 5)
    paths = batch.write_inputs([decision(0), decision(1)], tmp_path, 4)
    assert [p.name for p in paths] == ["part-00000.jsonl", "part-00001.jsonl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-00000.jsonl", "part-00001.jsonl"]
    with pytest.raises(ValueError, match="at least 1"):
        batch.write_inputs([decision()], tmp_path, 0)


def test_no_input_folder_stops_the_job_naming_the_folder(tmp_path, capsys):
    with pytest.raises(batch.BatchError, match="does not exist"):
        batch.input_shards(tmp_path / "missing")
    # before any model loads, whichever way the command is started
    assert batch.main(["--input", str(tmp_path / "missing"), "--output", str(tmp_path / "out")]) == 2
    assert server_main(["batch", "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "out")]) == 2
    assert "missing does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_empty_share_is_a_clean_exit_that_loads_no_model(tmp_path, capsys, monkeypatch):
    """An instance that ShardedByS3Key gave no object: Processing fails the whole job when any
    instance exits non-zero, so nothing to score is no failure (and loads no model)."""
    monkeypatch.setattr(batch, "load_engine", lambda *_: pytest.fail("no model loads for an empty share"))
    (tmp_path / "notes.txt").write_text("not a shard")
    with pytest.raises(batch.NoShards, match=r"holds no \*\.jsonl shard"):
        batch.input_shards(tmp_path)
    with pytest.raises(batch.BatchError, match=r"holds no \*\.jsonl shard"):  # the function: still an error
        batch.score_folder(object(), tmp_path, tmp_path / "out")
    assert batch.main(["--input", str(tmp_path), "--output", str(tmp_path / "out")]) == 0
    assert server_main(["batch", "--input", str(tmp_path), "--output", str(tmp_path / "out")]) == 0
    assert "share is empty, nothing to score" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_outputs_are_written_under_their_final_names_in_one_write(tmp_path, monkeypatch):
    """Processing uploads the output folder as files appear; a rename's upload is undocumented, so
    the signals and errors files are never renamed into place."""
    renamed: list[str] = []
    real_replace = Path.replace
    monkeypatch.setattr(Path, "replace", lambda self, target: renamed.append(self.name) or real_replace(self, target))
    monkeypatch.setattr(Path, "rename", lambda self, target: pytest.fail(f"{self} renamed"))
    batch.write_errors(tmp_path / "part-00000.errors.jsonl", [batch.LineError(2, "bad")])
    batch.write_signals(tmp_path / "part-00000.signals.npz", "b" * 64, [])
    assert renamed == [] and sorted(p.name for p in tmp_path.iterdir()) == ["part-00000.errors.jsonl",
                                                                           "part-00000.signals.npz"]


# ------------------------------------------------------------------------------------ resuming
def test_a_shard_is_skipped_only_when_its_signals_are_this_models(tmp_path):
    said: list[str] = []
    path = tmp_path / "part-00000.signals.npz"
    assert not batch.scored_before(path, MODEL, said.append)
    write_shard(path, MODEL, [request_key(MODEL, decision())], np.zeros((1, 4)), [[1.0, 2.0]], [1.0], ["v"])
    assert batch.scored_before(path, MODEL, said.append)
    assert not batch.scored_before(path, "cd" * 32, said.append)
    path.write_bytes(b"half a file")
    assert not batch.scored_before(path, MODEL, said.append)
    assert said[0].startswith("part-00000.signals.npz holds another model's signals (sha256 abababababab")
    assert "not a signals shard" in said[1] and said[1].endswith("scoring its input again")


def test_outputs_are_named_after_their_input_shard(tmp_path):
    shard = tmp_path / "in" / "part-00042.jsonl"
    assert batch.signals_path(tmp_path, shard) == tmp_path / "part-00042.signals.npz"
    assert batch.errors_path(tmp_path, shard) == tmp_path / "part-00042.errors.jsonl"


# ------------------------------------------------------------------------------------ the model folder
def tar_gz(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_an_absent_or_empty_model_folder_leaves_the_choice_to_the_settings(tmp_path):
    assert batch.model_in(tmp_path / "absent", tmp_path / "scratch") is None
    (tmp_path / "empty").mkdir()
    assert batch.model_in(tmp_path / "empty", tmp_path / "scratch") is None


def test_a_gguf_in_the_model_folder_is_used_as_it_is(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.gguf").write_bytes(b"GGUF")
    assert batch.model_in(tmp_path / "model", tmp_path / "scratch") == tmp_path / "model" / "m.gguf"
    assert not (tmp_path / "scratch").exists()


def test_a_model_archive_is_extracted_into_the_scratch_folder(tmp_path):
    (tmp_path / "model").mkdir()
    tar_gz(tmp_path / "model" / "model.tar.gz", {"weights/m.gguf": b"GGUF", "README.md": b"hi"})
    found = batch.model_in(tmp_path / "model", tmp_path / "scratch")
    assert found == (tmp_path / "scratch" / "weights" / "m.gguf").resolve() and found.read_bytes() == b"GGUF"


@pytest.mark.parametrize(("members", "links", "says"), [
    ({"../evil.gguf": b"x"}, None, "would be written outside the extraction folder"),
    ({"a/../../evil.gguf": b"x"}, None, "would be written outside the extraction folder"),
    ({"/tmp/evil.gguf": b"x"}, None, "would be written outside the extraction folder"),
    ({"m.gguf": b"x"}, {"link.gguf": "/etc/passwd"}, "is a link or a special file"),
])
def test_an_archive_reaching_outside_its_folder_is_refused_whole(tmp_path, members, links, says):
    (tmp_path / "model").mkdir()
    tar_gz(tmp_path / "model" / "model.tar.gz", members, links)
    with pytest.raises(ModelFileError, match=says):
        batch.model_in(tmp_path / "model", tmp_path / "scratch")
    assert not (tmp_path / "evil.gguf").exists() and not list((tmp_path / "scratch").iterdir())


def test_a_model_folder_without_exactly_one_model_is_refused(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("no model here")
    with pytest.raises(ModelFileError, match=r"holds no \*\.gguf and 0 \*\.tar\.gz archives \(notes\.txt\)"):
        batch.model_in(tmp_path / "model", tmp_path / "scratch")
    (tmp_path / "model" / "model.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(ModelFileError, match="not a readable tar archive"):
        batch.model_in(tmp_path / "model", tmp_path / "scratch")
    tar_gz(tmp_path / "model" / "model.tar.gz", {"a.gguf": b"x", "b.gguf": b"y"})
    with pytest.raises(ModelFileError, match="holds 2 GGUF files"):
        batch.model_in(tmp_path / "model", tmp_path / "scratch2")


def test_a_model_that_cannot_load_stops_the_job(tmp_path, capsys):
    batch.write_inputs([decision()], tmp_path / "in", 1)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "readme.txt").write_text("the GGUF was forgotten")
    code = batch.main(["--input", str(tmp_path / "in"), "--model-dir", str(tmp_path / "model"), "--output", str(tmp_path / "out")])
    assert code == 2 and "the model cannot load: the model folder" in capsys.readouterr().err


def test_a_model_file_must_be_a_file_and_is_not_given_with_a_model_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        batch.main(["--describe", "--model-file", str(tmp_path / "missing.gguf")])
    assert stopped.value.code == 2
    assert f"error: argument --model-file: {tmp_path / 'missing.gguf'} is not a file" in capsys.readouterr().err
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(SystemExit):
        batch.main(["--input", str(tmp_path), "--model-dir", str(tmp_path), "--model-file", str(tmp_path / "model.gguf")])
    assert "argument --model-file: not allowed with argument --model-dir" in capsys.readouterr().err


@pytest.mark.model
def test_describe_prints_the_model_alone_and_a_run_writes_its_summary(tmp_path, capsys, embedded_engine):
    """`--describe` (what a workstation asks before it looks up its cache): the ModelInfo of the
    GGUF `--model-file` names, alone on stdout; `--summary`: the run's figures, its seconds the
    scoring's alone."""
    from decision_contract import ModelInfo
    from decision_server.model_files import embedded_model_path

    model = str(embedded_model_path())
    assert batch.main(["--describe", "--model-file", model]) == 0
    out = capsys.readouterr().out
    assert ModelInfo.model_validate_json(out) == embedded_engine.model_info and out.count("\n") == 1
    batch.write_inputs([decision(0), decision(1)], tmp_path / "in", 1)
    with (tmp_path / "in" / "part-00000.jsonl").open("a") as shard:
        shard.write('{"id": "broken"}\n')
    assert batch.main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--model-file", model,
                       "--summary", str(tmp_path / "summary.json")]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {k: summary[k] for k in ("shards_scored", "shards_skipped", "items", "errors")} == {
        "shards_scored": 1, "shards_skipped": 0, "items": 2, "errors": 1}
    assert summary["seconds"] > 0 and summary["items_per_second"] == pytest.approx(2 / summary["seconds"])


# ------------------------------------------------------------------------------------ progress
def test_progress_is_logged_at_most_every_so_often_with_rate_and_time_left():
    lines: list[str] = []
    quiet = batch.Progress(10, lines.append, every=3600)
    quiet.start_shard("part-00000.jsonl", 10)
    for _ in range(10):
        quiet.advance()
    assert lines == []
    chatty = batch.Progress(4, lines.append, every=0)
    chatty.start_shard("part-00001.jsonl", 3)
    chatty.advance()
    assert len(lines) == 1
    assert lines[0].startswith("part-00001.jsonl: 1/3; all shards: 1/4 items, ") and " items/s, about " in lines[0]
    assert lines[0].endswith(" left")
    assert batch._duration(3725) == "1h02m" and batch._duration(65) == "1m05s" and batch._duration(math.inf) == "?"


# ------------------------------------------------------------------------------------ on the model
def decisions_for_the_model() -> list[Decision]:
    """Two dozen decisions: signals decisions over banking-like texts and lettered questions of
    tickets, each its own state."""
    texts = ["my card has not arrived yet", "I was charged twice for one coffee", "how do I top up with a cheque",
             "the exchange rate on my transfer looks wrong", "my PIN is blocked after three tries",
             "can I get a virtual card", "a payment I don't recognise is on my statement",
             "why is my transfer still pending", "I want to close my account", "the app does not accept my ID photo",
             "can I change the currency of my account", "my contactless payment was declined"]
    signals = [decision(i, state=text) for i, text in enumerate(texts)]
    lettered = [Decision(id=f"q-{i}", state=f"Ticket {i}: {text}.", question=question, options=options,
                         return_hidden_state=True)
                for i, (text, (question, options)) in enumerate(zip(texts, QUESTIONS * 3))]
    return signals + lettered


@pytest.fixture(scope="module")
def scored_folder(embedded_engine, tmp_path_factory):
    """The decisions in three shards plus one with bad lines, scored once (three requests in flight)."""
    root = tmp_path_factory.mktemp("batch")
    decisions = decisions_for_the_model()
    batch.write_inputs(decisions, root / "in", 3)
    too_long = decision(99, state="word " * 6000)  # about 6,000 tokens: past DECISION_MAX_PROMPT_TOKENS
    (root / "in" / "part-00003.jsonl").write_text("\n".join([
        decision(100).model_dump_json(), '{"id": "broken", ', decision(101).model_dump_json(),
        json.dumps(decision().model_dump(mode="json") | {"options": []}), too_long.model_dump_json(),
        decision(102).model_dump_json()]) + "\n")
    lines: list[str] = []
    embedded_engine.scheduler.clear_cache()
    summary = batch.score_folder(embedded_engine, root / "in", root / "out", in_flight=3, log=lines.append)
    return root, decisions + [decision(100), decision(101), decision(102)], summary, lines


@pytest.mark.model
def test_a_folder_is_scored_shard_by_shard_with_a_summary(scored_folder, embedded_engine):
    root, decisions, summary, lines = scored_folder
    assert (summary.shards_scored, summary.shards_skipped, summary.items, summary.errors) == (4, 0, len(decisions), 3)
    assert summary.seconds > 0 and summary.items_per_second > 0
    assert sorted(p.name for p in (root / "out").iterdir()) == [
        "model.json", "part-00000.signals.npz", "part-00001.signals.npz", "part-00002.signals.npz",
        "part-00003.errors.jsonl", "part-00003.signals.npz"]
    assert json.loads((root / "out" / "model.json").read_text()) == embedded_engine.model_info.model_dump(mode="json")
    assert lines[0].startswith(f"4 shards in {root / 'in'}: 4 to score ({len(decisions) + 3} lines), 0 scored before")
    assert any(line.startswith("part-00003.jsonl: 3 items, 3 errors in ") for line in lines)
    assert lines[-1].startswith(f"done: 4 shards scored, 0 skipped; {len(decisions)} items, 3 errors in ")


@pytest.mark.model
def test_bad_lines_are_reported_with_their_numbers_and_the_rest_is_scored(scored_folder, embedded_engine):
    root, _, _, _ = scored_folder
    errors = [json.loads(line) for line in (root / "out" / "part-00003.errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [2, 4, 5]
    assert errors[0]["reason"].startswith("the line is not valid JSON: ")
    assert errors[1]["reason"] == "decision.options: List should have at least 2 items after validation, not 0"
    assert errors[2]["reason"].startswith("decision: the prompt is ") and "DECISION_MAX_PROMPT_TOKENS" in errors[2]["reason"]
    shard = read_shard(root / "out" / "part-00003.signals.npz")
    sha = embedded_engine.model_info.sha256
    assert shard.keys == [request_key(sha, decision(i)) for i in (100, 101, 102)]


@pytest.mark.model
def test_the_rows_are_the_engines_answers(scored_folder, embedded_engine):
    """Each row against the same decision asked of the engine alone, cold (the HTTP path's call):
    the same key, prompt version and top option, and the hidden state and logits within the drift
    that packing many sequences into one forward pass may cause (tests/container/test_engine.py)."""
    from decision_server.readout import PROMPT_VERSION
    from tests.container.test_engine import BATCH_TOLERANCE, HIDDEN_TOLERANCE, LOGIT_TOLERANCE

    root, decisions, _, _ = scored_folder
    sha = embedded_engine.model_info.sha256
    rows = {}
    for path in sorted((root / "out").glob("*.signals.npz")):
        shard = read_shard(path)
        assert shard.model_sha256 == sha
        rows.update({key: shard.row(i) for i, key in enumerate(shard.keys)})
    assert len(rows) == len(decisions)
    for d in decisions:
        hidden, logits, mass, version = rows[request_key(sha, d)]
        embedded_engine.scheduler.clear_cache()  # else the batch's own cached answer comes back
        alone = embedded_engine.decide_one(d)
        assert version == alone.prompt_version == PROMPT_VERSION
        assert len(hidden) == embedded_engine.model_info.hidden_size
        # the shard keeps the hidden state as float16: about 0.05 of the distance, far inside the tolerance
        assert math.dist(hidden, alone.hidden_state) <= HIDDEN_TOLERANCE
        assert max(abs(a - b) for a, b in zip(logits, alone.option_logits)) <= LOGIT_TOLERANCE
        assert mass == pytest.approx(alone.allowed_token_mass, abs=BATCH_TOLERANCE)
        first, second = sorted(alone.probabilities, reverse=True)[:2]
        if first - second > 2 * BATCH_TOLERANCE:
            assert d.option_ids[int(np.argmax(logits))] == alone.top_option_id


@pytest.mark.model
def test_a_second_run_skips_every_shard(scored_folder, embedded_engine):
    root, _, _, _ = scored_folder
    before = {p.name: p.stat().st_mtime_ns for p in (root / "out").glob("part-*")}
    lines: list[str] = []
    summary = batch.score_folder(embedded_engine, root / "in", root / "out", log=lines.append)
    assert (summary.shards_scored, summary.shards_skipped, summary.items, summary.errors) == (0, 4, 0, 0)
    assert sum("skipped, " in line for line in lines) == 4
    assert {p.name: p.stat().st_mtime_ns for p in (root / "out").glob("part-*")} == before
