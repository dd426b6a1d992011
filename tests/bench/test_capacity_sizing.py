"""bench.capacity's sizing: template.yaml's capacity defaults are what the capacity table
recommends for the documented default scale, its scaling targets' mapping is the throughput
table's, the doc's table is the one bench.capacity prints, and the arithmetic and refusals."""

from __future__ import annotations

import json
import math

import pytest

from bench import capacity
from bench.capacity import Assumptions, PathRecord, TableError
from local.cloudformation import REPO_ROOT, Stack
from tests.infra.test_template_properties import CPU, GPU

DOC = REPO_ROOT / "docs" / "operations" / "capacity.md"


@pytest.fixture(scope="module")
def recorded() -> list[capacity.Recommendation]:
    measured = capacity.read_ledger(capacity.LEDGER)
    return capacity.recommendations(measured, Assumptions(dict(capacity.DEFAULT_MIX)), capacity.load_throughput())


def test_the_template_defaults_are_the_recommendation_for_the_default_scale(recorded):
    parameters = Stack.load().template["Parameters"]
    (default,) = [r for r in recorded if r.scale == capacity.DEFAULT_SCALE]
    assert {name: int(parameters[name]["Default"]) for name in capacity.SIZED} == default.values
    # The endpoint's ceiling holds the peak at the target: more than the floor, as the table says.
    assert default.values["EndpointMaxInstances"] > default.values["EndpointMinInstances"] >= 1


def test_the_scaling_targets_mapping_is_the_throughput_tables():
    template = Stack.load().template
    table = capacity.load_throughput()
    assert template["Mappings"]["EndpointInvocationsPerMinute"] == table.mapping()
    raw = json.loads(capacity.THROUGHPUT.read_text())
    # Every CPU type the template allows has a target, and every model size.
    assert template["Parameters"]["CpuInstanceType"]["AllowedValues"] == list(raw["cpu_instances"])
    assert template["Parameters"]["DecisionModelSize"]["AllowedValues"] == list(raw["models"])


def test_the_capacity_page_shows_the_table_bench_capacity_computes(recorded):
    page = DOC.read_text(encoding="utf-8")
    block = "\n".join(capacity.sizing_lines(recorded, capacity.load_throughput()))
    assert block in page, "docs/operations/capacity.md: paste `python -m bench.capacity --recommend`'s tables"


@pytest.mark.parametrize("parameters, target", [
    ({}, 244),  # ml.c6i.8xlarge with the 135M model
    ({"DecisionModelSize": "4B"}, 8),
    ({"CpuInstanceType": "ml.c6i.xlarge"}, 30),
    ({"EndpointCompute": "GPU", "DecisionModelSize": "4B"}, 56),
    ({"InvocationsPerInstanceTarget": "100", "DecisionModelSize": "4B"}, 100),  # an override wins
], ids=["default", "4b", "small-cpu", "gpu-4b", "override"])
def test_the_scaling_target_follows_the_instance_type_and_the_model(parameters, target):
    base = GPU if parameters.get("EndpointCompute") == "GPU" else CPU
    stack = Stack.load(parameters={**base, **parameters})
    always_on = stack.resolve(stack.properties("DecisionEndpointScalingPolicy"))
    assert int(always_on["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]) == target
    zero = Stack.load(parameters={**base, **parameters, "EndpointScaleToZero": "true"})
    per_copy = zero.resolve(zero.properties("DecisionComponentScalingPolicy"))
    assert int(per_copy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]) == target


def test_the_console_api_is_throttled_by_its_parameters():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "ReviewConsoleThrottlingRateLimit": "7",
                                   "ReviewConsoleThrottlingBurstLimit": "9"})
    settings = stack.resolve(stack.properties("ReviewConsoleApi")["DefaultRouteSettings"])
    assert {k: int(v) for k, v in settings.items()} == {"ThrottlingBurstLimit": 9, "ThrottlingRateLimit": 7}


def test_an_instance_type_the_template_does_not_size_is_refused_by_name():
    with pytest.raises(Exception, match="CpuInstanceType"):
        Stack.load(parameters={**CPU, "CpuInstanceType": "ml.r5.large"})


# ------------------------------------------------------------------------------ the arithmetic
def _ticket(invocations: int = 1) -> PathRecord:
    return PathRecord(calls=[("TicketIntakeFunction", "sagemaker-runtime", "InvokeEndpoint", invocations),
                             ("TicketIntakeFunction", "stepfunctions", "StartExecution", 1),
                             ("reviewer's browser", "apigateway", "HTTP API request", 2)],
                      memory_mb={"TicketIntakeFunction": 512})


def test_each_value_is_the_daily_peaks_demand_rounded_up_and_held_to_the_parameters_bounds():
    records = {path: _ticket() for path in capacity.ITEM_PATHS} | {capacity.LISTING: PathRecord(calls=[])}
    assumptions = Assumptions(dict(capacity.DEFAULT_MIX), peak=3.0, endpoint_seconds=1.0, call_seconds=0.0)
    table = capacity.ThroughputTable(0.5, {("m", "s"): capacity.Throughput("m", "s", 10.0, "test")})
    parameters = {name: {"MinValue": 1} for name in capacity.SIZED}
    parameters["TicketMaxConcurrency"] = {"MinValue": 2, "MaxValue": 100}
    scale = 864_000  # 10 items a second on average, 30 at the peak
    found = capacity.recommend(records, assumptions, table, scale, "m", "s", parameters)
    assert found.target == 300  # 10/s × 0.5 × 60
    assert found.values["EndpointMinInstances"] == 1  # the average, 10/s, at 10/s an instance
    assert found.values["EndpointMaxInstances"] == 6  # 1,800 a minute at the peak over 300
    assert found.values["TicketMaxConcurrency"] == 30  # 30 a second × 1 s each
    assert found.values["ReviewConsoleThrottlingRateLimit"] == 60 and found.values["ReviewConsoleThrottlingBurstLimit"] == 150
    assert not found.capped("TicketMaxConcurrency")
    tenfold = capacity.recommend(records, assumptions, table, scale * 10, "m", "s", parameters)
    assert tenfold.values["TicketMaxConcurrency"] == 100 and tenfold.capped("TicketMaxConcurrency")
    assert math.isclose(tenfold.needed["TicketMaxConcurrency"], 300)
    line = next(r for r in capacity.sizing_lines([found, tenfold], table) if "`TicketMaxConcurrency`" in r)
    assert line == "| `TicketMaxConcurrency` | 30 | 100 (needs 300) |"


# ------------------------------------------------------------------------------ the throughput table
def test_every_row_is_an_estimate_derived_from_the_measurements():
    table = capacity.load_throughput()
    cpu = table.of("ml.c6i.8xlarge", "135M")
    assert math.isclose(cpu.decisions_per_second, 0.51 / 2 * 32) and cpu.basis.startswith("estimate:")
    assert math.isclose(table.of("ml.c6i.8xlarge", "4B").decisions_per_second, 0.51 / 2 * 32 * 135e6 / 4e9)
    assert math.isclose(table.of(capacity.GPU_POOL, "135M").decisions_per_second, 1 / 0.018)
    assert all(row.basis.startswith("estimate:") for row in table.rows.values())
    with pytest.raises(TableError, match="'ml.r5.large'"):
        table.of("ml.r5.large", "135M")


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw.update(safety_factor=1.5), "safety_factor: 1.5 is over 1"),
    (lambda raw: raw.update(safety_factor=0), "safety_factor: must be a number > 0"),
    (lambda raw: raw["cpu_instances"].update({"ml.c6i.xlarge": 0}), r"cpu_instances.ml.c6i.xlarge: must be an integer > 0"),
    (lambda raw: raw["measured"]["gpu"].update(model="70B"), "measured.gpu.model: '70B' is none of models"),
    (lambda raw: raw["measured"]["cpu"].update(threads=1.5), "measured.cpu.threads: must be an integer > 0"),
    (lambda raw: raw["models"]["4B"].update(parameters=-1), r"models.4B.parameters: must be a number > 0"),
    (lambda raw: raw.pop("measured"), "needs measured.cpu"),
], ids=["safety-over-1", "safety-0", "vcpus", "model", "threads", "parameters", "missing"])
def test_a_bad_throughput_table_is_refused_naming_the_field(tmp_path, change, message):
    raw = json.loads(capacity.THROUGHPUT.read_text())
    change(raw)
    path = tmp_path / "endpoint-throughput.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(TableError, match=message):
        capacity.load_throughput(path)


def test_recommend_prints_the_tables_and_the_mapping_from_the_recorded_ledger(capsys):
    assert capacity.main(["--recommend"]) == 0
    out = capsys.readouterr().out
    assert "| `EndpointMaxInstances` |" in out
    assert "\n".join(capacity.mapping_yaml(capacity.load_throughput())) in out


def test_record_ledger_writes_what_read_ledger_reads(tmp_path):
    measured = capacity.read_ledger(capacity.LEDGER)
    capacity.record_ledger(measured, tmp_path / "ledger.json")
    assert capacity.read_ledger(tmp_path / "ledger.json").to_json() == measured.to_json()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TableError, match="bad.json: not a ledger"):
        capacity.read_ledger(tmp_path / "bad.json")
