"""bench.capacity's arithmetic and tables: the price and quota tables as read (and refused), the
mix, an item's price by service, a month of items, and the rate a mix asks of a quota. The
ledger itself is measured on the stack: tests/e2e/test_capacity_ledger.py."""

from __future__ import annotations

import json
import math

import pytest

from bench import capacity
from bench.capacity import Assumptions, PathRecord, Quota, TableError

MIX = dict(capacity.DEFAULT_MIX)


def record(**overrides) -> PathRecord:
    base = dict(calls=[("ticket source", "sqs", "SendMessage", 1), ("Lambda SQS poller", "sqs", "ReceiveMessage", 1),
                       ("TicketIntakeFunction", "lambda", "Invoke", 1),
                       ("TicketIntakeFunction", "sagemaker-runtime", "InvokeEndpoint", 2),
                       ("TicketIntakeFunction", "stepfunctions", "StartExecution", 1),
                       ("workflow (Step Functions)", "events", "PutEvents", 1),
                       ("workflow (Step Functions)", "dynamodb", "PutItem", 3)],
                transitions=20, read_units=4.0, write_units=10.0, invocations={"TicketIntakeFunction": 1},
                gb_seconds={"TicketIntakeFunction": 0.25}, memory_mb={"TicketIntakeFunction": 512}, keys=[])
    return PathRecord(**{**base, **overrides})


# ------------------------------------------------------------------------------ the tables
def test_the_shipped_tables_read_and_price_every_service_the_stack_calls():
    prices = capacity.load_prices()
    assert prices.region == "us-east-1" and prices.recorded
    for service, operation in [("lambda", "Invoke"), ("sqs", "ReceiveMessage"), ("events", "PutEvents"),
                               ("events", "service event"), ("sns", "Publish"), ("apigateway", "HTTP API request"),
                               ("dynamodb", "Query"), ("stepfunctions", "StartExecution"),
                               ("sagemaker-runtime", "InvokeEndpoint"), ("cloudwatch", "DescribeAlarms"),
                               ("sts", "GetCallerIdentity"), ("ssm", "GetParameter"), ("secretsmanager", "GetSecretValue"),
                               ("s3", "GetObject")]:
        assert prices.of_call(service, operation) >= 0
    assert prices.of_call("events", "service event") == 0 < prices.of_call("events", "PutEvents")
    assert all(p.source.startswith("https://") for p in [*prices.calls.values(), *prices.units.values()])
    raw, quotas = capacity.load_quotas()
    assert raw["recorded"] and {q.id for q in quotas} >= {"sfn-start-execution", "sfn-describe-execution",
                                                          "sfn-state-transitions", "lambda-concurrency",
                                                          "apigateway-http-account", "dynamodb-partition-read",
                                                          "dynamodb-partition-write", "events-put-events"}
    assert next(q for q in quotas if q.id == "sfn-describe-execution").limit == 15


def test_a_call_the_table_does_not_price_is_named():
    with pytest.raises(KeyError, match="kinesis:PutRecord"):
        capacity.load_prices().of_call("kinesis", "PutRecord")


def _table(tmp_path, **changes):
    raw = json.loads(capacity.PRICES.read_text())
    for dotted, value in changes.items():
        target, *path = dotted.split("/")
        node = raw
        for part in [target, *path][:-1]:
            node = node[part]
        if value is None:
            del node[[target, *path][-1]]
        else:
            node[[target, *path][-1]] = value
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("change, message", [
    ({"calls/sqs:*/usd": -1}, r"calls\.sqs:\*\.usd: must be a number of dollars >= 0"),
    ({"calls/sqs:*/usd": "0.4"}, r"calls\.sqs:\*\.usd"),
    ({"calls/sqs:*/usd": float("nan")}, r"calls\.sqs:\*\.usd"),
    ({"calls/sqs:*/source": "aws.amazon.com/sqs/pricing"}, r"calls\.sqs:\*\.source: must be the https:// address"),
    ({"units/lambda_gb_second_arm64/unit": " "}, r"units\.lambda_gb_second_arm64\.unit"),
    ({"units/dynamodb_read_request_unit": None}, r"units: missing dynamodb_read_request_unit"),
    ({"checked_against_source": "no"}, r"checked_against_source: must be true or false"),
    ({"recorded": None}, r"recorded: missing"),
])
def test_a_bad_price_table_is_refused_naming_the_field(tmp_path, change, message):
    with pytest.raises(TableError, match=message):
        capacity.load_prices(_table(tmp_path, **change))


def test_a_bad_quota_table_is_refused_naming_the_field(tmp_path):
    raw = json.loads(capacity.QUOTAS.read_text())
    raw["quotas"].append(dict(raw["quotas"][0]))
    path = tmp_path / "quotas.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(TableError, match="id 'sfn-start-execution' twice"):
        capacity.load_quotas(path)
    raw["quotas"] = [{**raw["quotas"][0], "per_second": 0}]
    path.write_text(json.dumps(raw))
    with pytest.raises(TableError, match=r"quotas\[0\]\.per_second: must be a number > 0"):
        capacity.load_quotas(path)
    raw["quotas"] = [{**raw["quotas"][0], "per_second": 300, "counts": []}]
    path.write_text(json.dumps(raw))
    with pytest.raises(TableError, match=r"quotas\[0\]\.counts: must list what it counts"):
        capacity.load_quotas(path)


@pytest.mark.parametrize("text, message", [
    ("automatic=0.7,review=0.2", "sum to 0.9, not 1"),
    ("automatic=1,batch=0", "'batch' is no path"),
    ("automatic=x", "share 'x' is not a number"),
    ("automatic=0.5,automatic=0.5", "automatic given twice"),
    ("automatic", "write path=share"),
    ("automatic=1.5,review=-0.5", "not between 0 and 1"),
])
def test_a_bad_mix_is_refused_naming_the_path(text, message):
    with pytest.raises(TableError, match=message):
        capacity.parse_mix(text)


def test_the_default_mix_covers_every_item_path():
    mix = capacity.parse_mix(",".join(f"{p}={s}" for p, s in MIX.items()))
    assert mix == MIX and math.isclose(sum(mix.values()), 1.0)
    assert capacity.parse_mix("automatic=1") == {"automatic": 1.0, "review": 0.0, "page": 0.0, "correction": 0.0,
                                                 "incident resolved": 0.0}


# ------------------------------------------------------------------------------ the arithmetic
def test_an_item_is_priced_call_by_call_by_service():
    prices = capacity.load_prices()
    units = prices.units
    cost = capacity.item_cost(record(), prices, endpoint_seconds=1.0, call_seconds=0.1)
    assert cost["sqs"] == pytest.approx(2 * prices.of_call("sqs", "SendMessage"))
    assert cost["events"] == pytest.approx(prices.of_call("events", "PutEvents"))
    assert cost["stepfunctions"] == pytest.approx(20 * units["stepfunctions_standard_transition"].usd)
    assert cost["dynamodb"] == pytest.approx(4 * units["dynamodb_read_request_unit"].usd
                                             + 10 * units["dynamodb_write_request_unit"].usd)
    # two decisions at 1 s and its one other call (StartExecution) at 0.1 s: 2.1 s × 0.5 GB
    assert cost["lambda"] == pytest.approx(prices.of_call("lambda", "Invoke") + 1.05 * units["lambda_gb_second_arm64"].usd)
    assert "sagemaker-runtime" not in cost  # the endpoint is priced by the hour


def test_a_month_is_the_mix_of_item_prices_times_items_plus_the_endpoint():
    costs = {"automatic": {"sqs": 1e-6}, "review": {"sqs": 3e-6, "apigateway": 2e-6}, "page": {}, "correction": {},
             "incident resolved": {}, "console listing": {"apigateway": 1e-6}}
    mix = {"automatic": 0.5, "review": 0.5, "page": 0.0, "correction": 0.0, "incident resolved": 0.0}
    total = capacity.month(costs, Assumptions(mix, listings_per_review=2), 1_000_000, endpoint_usd=100.0)
    days = capacity.DAYS_PER_MONTH
    assert total["sqs"] == pytest.approx((0.5 * 1e-6 + 0.5 * 3e-6) * 1e6 * days)
    assert total["apigateway"] == pytest.approx((0.5 * 2e-6 + 0.5 * 2 * 1e-6) * 1e6 * days)  # two listings per review
    assert total["sagemaker (endpoint instance-hours)"] == 100.0


def test_express_what_if_prices_executions_not_transitions():
    prices = capacity.load_prices()
    standard, express = capacity.express_month(record(), prices, items_per_day=1000, seconds=1.0)
    assert standard == pytest.approx(20 * 0.000025 * 1000 * 30)
    assert express == pytest.approx((0.000001 + 1.0 * 64 / 1024 * 0.0000166667) * 1000 * 30)


def test_a_quota_is_reached_where_the_mix_asks_its_limit_at_the_peak():
    quota = Quota("start", "StartExecution", ("stepfunctions:StartExecution",), 300.0, False, "account", "ask", "https://x")
    records = {"automatic": record(), "review": record(calls=[("f", "stepfunctions", "StartExecution", 2)])}
    mix = {"automatic": 0.5, "review": 0.5, "page": 0.0, "correction": 0.0, "incident resolved": 0.0}
    (demand,) = capacity.demands(records, [quota], Assumptions(mix, peak=3.0, listings_per_review=0))
    per_item = (0.5 * 1 + 0.5 * 2) * 3.0 / 86_400  # calls/s at the peak for one item a day
    assert demand.per_item_a_day == pytest.approx(per_item)
    assert demand.reached_at() == pytest.approx(300 / per_item)
    assert capacity.first_quotas([demand]) == {"automatic": demand, "review": demand}


def test_lambda_concurrency_is_each_item_busy_seconds_at_the_rate():
    quota = Quota("ticket", "ticket intake", ("lambda:concurrency:TicketIntakeFunction",), 5.0, True, "stack", "raise", "https://x")
    mix = {"automatic": 1.0, "review": 0.0, "page": 0.0, "correction": 0.0, "incident resolved": 0.0}
    (demand,) = capacity.demands({"automatic": record()}, [quota], Assumptions(mix, peak=1.0, endpoint_seconds=1.0,
                                                                                call_seconds=0.5))
    assert demand.per_item_a_day == pytest.approx(2.5 / 86_400)  # 2 decisions × 1 s + StartExecution × 0.5 s


def test_a_dynamodb_key_is_shared_when_the_items_of_two_paths_use_it():
    keys_auto = [("audit", "outcome-audited_at", "auto_routed", "write", 2.0), ("audit", "", "CAP-1", "write", 2.0)]
    keys_corr = [("audit", "outcome-audited_at", "auto_routed", "write", 4.0), ("audit", "", "CAP-2", "write", 2.0)]
    records = {"automatic": record(keys=keys_auto), "correction": record(keys=keys_corr)}
    assert capacity.shared_keys(records) == {("audit", "outcome-audited_at", "auto_routed", "write"):
                                             {"automatic": 2.0, "correction": 4.0}}
    quota = Quota("w", "partition writes", ("dynamodb:shared-key-write",), 1000.0, False, "partition", "shard", "https://x")
    mix = {"automatic": 0.5, "review": 0.0, "page": 0.0, "correction": 0.5, "incident resolved": 0.0}
    (demand,) = capacity.demands(records, [quota], Assumptions(mix, peak=2.0))
    assert demand.per_item_a_day == pytest.approx((0.5 * 2 + 0.5 * 4) * 2.0 / 86_400)
    assert "auto_routed" in demand.detail


def test_the_writes_of_a_sharded_key_are_one_shard_s_share_and_its_reads_are_each_shard_s():
    keys_auto = [("open", "idx", "open#3", "write", 2.0), ("open", "idx", "open#3", "read", 5.0)]
    keys_page = [("open", "idx", "open#7", "write", 4.0), ("open", "idx", "open#3", "read", 5.0)]
    shared = capacity.shared_keys({"automatic": record(keys=keys_auto), "page": record(keys=keys_page)})
    # two shards seen written: each takes half of what an item writes; every item reads shard 3 whole
    assert shared == {("open", "idx", "open#<shard>", "write"): {"automatic": 1.0, "page": 2.0},
                      ("open", "idx", "open#3", "read"): {"automatic": 5.0, "page": 5.0}}


def test_a_path_that_grows_is_named_with_the_calls_that_grow():
    small = {"automatic": record(), "review": record()}
    large = {"automatic": record(), "review": record(calls=[*record().calls, ("console", "stepfunctions", "DescribeExecution", 9)])}
    measured = capacity.Measured({"small": {}, "large": {}}, {"small": small, "large": large})
    assert measured.growing() == {"review": ["stepfunctions DescribeExecution 0 → 9"]}
    again = capacity.Measured.from_json(json.loads(json.dumps(measured.to_json())))
    assert again.growing() == measured.growing()


def test_a_ledger_measured_before_is_priced_again_without_measuring(tmp_path, capsys):
    paths = {path: record() for path in capacity.ITEM_PATHS}
    paths[capacity.LISTING] = record(calls=[("ReviewConsoleFunction", "stepfunctions", "DescribeExecution", 500)])
    ledger = capacity.Measured({"small": {"pending_reviews": 10}, "large": {"pending_reviews": 1000}},
                               {"small": paths, "large": paths})
    saved = tmp_path / "ledger.json"
    saved.write_text(json.dumps({"ledger": ledger.to_json()}))
    assert capacity.main(["--ledger", str(saved), "--out", str(tmp_path / "out.json")]) == 0
    printed = capsys.readouterr().out
    assert "no path's calls differ between the sizes" in printed and "total a month" in printed
    assert "Step Functions DescribeExecution" in printed.split("the first quota each path meets:")[1]
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["assumptions"]["mix"] == MIX and report["quotas"]["first"]["console listing"] == "sfn-describe-execution"
    assert capacity.main(["--ledger", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: not a ledger" in capsys.readouterr().err
