"""bench.prices: the price file refreshed from the AWS Price List Query API, on a stubbed `pricing`
client (botocore's Stubber: no network, and every request checked against the API's model).

The prices in these products are made up for the tests; only their shape is the API's."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber

from bench import cost
from bench import prices as bp
from training.processing_estimate import offer

TODAY = "2027-01-15"
REGION = "us-east-1"


def entry(instance_type: str, usagetype: str, usd: str, sku: str, *, component: str | None = None,
          unit: str = "Hrs", operation: str = "RunInstance") -> str:
    """One PriceList entry as the API returns it: a JSON string of product, terms and dates."""
    attributes = {
        "regionCode": REGION, "servicecode": "AmazonSageMaker", "usagetype": usagetype, "locationType": "AWS Region",
        "location": "US East (N. Virginia)", "servicename": "Amazon SageMaker", "instanceName": instance_type,
        "operation": operation, "computeType": "Standard Instances", "vCpu": "32", "memory": "64 GiB",
    }
    if component:
        attributes["component"] = component
    offer_code, rate_code = "JRTCKXETXF", "6YS6EN2CT7"
    return json.dumps({
        "product": {"productFamily": "ML Instance", "attributes": attributes, "sku": sku},
        "serviceCode": "AmazonSageMaker",
        "terms": {"OnDemand": {f"{sku}.{offer_code}": {
            "priceDimensions": {f"{sku}.{offer_code}.{rate_code}": {
                "unit": unit, "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": f"${usd} per {usagetype.split('-', 1)[1].split(':')[0]} {instance_type} in US East (N. Virginia)",
                "rateCode": f"{sku}.{offer_code}.{rate_code}", "pricePerUnit": {"USD": usd}}},
            "sku": sku, "effectiveDate": "2026-12-01T00:00:00Z", "offerTermCode": offer_code, "termAttributes": {}}}},
        "version": "20261201000000", "publicationDate": "2026-12-01T00:00:00Z",
    })


C7I = "ml.c7i.8xlarge"
HOST = entry(C7I, "USE1-Host:ml.c7i.8xlarge", "1.6660000000", "AAAAHOSTC7I8XL01", component="Hosting")
PROCESSING = entry(C7I, "USE1-Processing:ml.c7i.8xlarge", "1.7010000000", "BBBBPROCC7I8XL02", component="Processing")
TRAIN = entry(C7I, "USE1-Train:ml.c7i.8xlarge", "1.7010000000", "CCCCTRAINC7I8X03", component="Training")
ASYNC = entry(C7I, "USE1-AsyncInf:ml.c7i.8xlarge", "1.6660000000", "DDDDASYNCC7I8X04")


def price_file(tmp_path: Path) -> Path:
    """The shipped file's shape: ml.c7i.8xlarge in both lists, ml.g6e.xlarge (never found) in both."""
    path = tmp_path / "instance-prices.json"
    path.write_text(json.dumps({
        "as_of": "2025-10-01", "region": REGION, "currency": "USD", "offer": "real-time", "check": "https://x",
        "instances": [
            {"type": C7I, "vcpus": 32, "gpu": None, "usd_per_hour": 1.5},
            {"type": "ml.g6e.xlarge", "vcpus": 4, "gpu": "NVIDIA L40S", "usd_per_hour": 2.336},
        ],
        "processing": {
            "as_of": "2026-12-04", "region": REGION, "currency": "USD", "offer": "processing", "estimated": True,
            "basis": "ESTIMATES: EC2 x 1.2", "check": "https://x", "items_per_second_per_vcpu": 0.5,
            "instances": [
                {"type": C7I, "vcpus": 32, "gpu": None, "usd_per_hour": 1.714, "estimated": True, "ec2_usd_per_hour": 1.428},
                {"type": "ml.g6e.xlarge", "vcpus": 4, "gpu": "NVIDIA L40S", "usd_per_hour": 2.233, "estimated": True,
                 "ec2_usd_per_hour": 1.861},
            ]}}))
    return path


def request(instance_type: str, token: str | None = None) -> dict:
    """What the command must send for one type (the Stubber compares it, and botocore validates it)."""
    params = {"ServiceCode": "AmazonSageMaker", "MaxResults": 100,
              "Filters": [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
                          {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type}]}
    return {**params, "NextToken": token} if token else params


@pytest.fixture
def pricing():
    client = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test").client("pricing", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def run(path: Path, client, *extra: str) -> tuple[int, list[str]]:
    said: list[str] = []
    code = bp.main(["--file", str(path), *extra], client=client, today=TODAY, say=said.append)
    return code, said


def test_found_figures_are_written_with_their_source_and_date_and_the_rest_marked_estimated(tmp_path, pricing):
    client, stubber = pricing
    path = price_file(tmp_path)
    # two pages for ml.c7i.8xlarge (the paginator follows NextToken), then nothing but training for ml.g6e.xlarge
    stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [TRAIN, HOST], "NextToken": "page-2"},
                         request(C7I))
    stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [PROCESSING, ASYNC]}, request(C7I, "page-2"))
    stubber.add_response("get_products", {"FormatVersion": "aws_v1",
                                          "PriceList": [entry("ml.g6e.xlarge", "USE1-Train:ml.g6e.xlarge", "2.0", "EEEETRAING6E05")]},
                         request("ml.g6e.xlarge"))
    code, said = run(path, client)
    assert code == 0
    out = "\n".join(said)
    # the table: type, kind, USD/h, sku
    assert "ml.c7i.8xlarge     hosting        1.6660  AAAAHOSTC7I8XL01   USE1-Host:ml.c7i.8xlarge" in out
    assert "ml.c7i.8xlarge     processing     1.7010  BBBBPROCC7I8XL02   USE1-Processing:ml.c7i.8xlarge" in out
    assert "AsyncInf, Train" in out  # the other products, named and left alone
    assert "2 of 4 figures published, 2 kept and marked estimated" in out

    written = json.loads(path.read_text())
    host, g6e_host = written["instances"]
    assert host == {"type": C7I, "vcpus": 32, "gpu": None, "usd_per_hour": 1.666, "as_of": TODAY,
                    "source": "AWS Price List API, AmazonSageMaker, AAAAHOSTC7I8XL01"}
    proc, g6e_proc = written["processing"]["instances"]
    assert proc == {"type": C7I, "vcpus": 32, "gpu": None, "usd_per_hour": 1.701, "as_of": TODAY,
                    "source": "AWS Price List API, AmazonSageMaker, BBBBPROCC7I8XL02"}  # the estimate's fields gone
    # not found: the figure kept, marked estimated per row with why, and the date it had
    assert (g6e_host["usd_per_hour"], g6e_host["estimated"], g6e_host["as_of"]) == (2.336, True, "2025-10-01")
    assert "no hosting product" in g6e_host["note"] and "source" not in g6e_host
    assert (g6e_proc["usd_per_hour"], g6e_proc["estimated"], g6e_proc["ec2_usd_per_hour"]) == (2.233, True, 1.861)
    assert g6e_proc["as_of"] == "2026-12-04" and f"for {REGION} on {TODAY}: no processing product" in g6e_proc["note"]
    # the blocks: dated the refresh, still estimated while a row is, their other keys kept
    assert (written["as_of"], written["processing"]["as_of"]) == (TODAY, TODAY)
    assert written["estimated"] is True and written["processing"]["estimated"] is True
    assert written["processing"]["basis"] == "ESTIMATES: EC2 x 1.2" and written["processing"]["items_per_second_per_vcpu"] == 0.5
    assert "fetched 2027-01-15" in written["processing"]["source"]
    # one row a line, as the shipped file
    assert f'    {{"type": "{C7I}", "vcpus": 32, "gpu": null, "usd_per_hour": 1.666, ' in path.read_text()

    # its readers: bench/cost.py and offer() (which reads the processing list first)
    assert cost.load_prices(path)["instances"][0]["usd_per_hour"] == 1.666
    found = offer(C7I, path)
    assert found.usd_per_hour == 1.701 and found.items_per_second_per_vcpu == 0.5
    still = offer("ml.g6e.xlarge", path)
    assert still.usd_per_hour == 2.233 and "(estimated, not published)" in still.basis  # never shown as published


def test_every_figure_found_clears_the_estimate(tmp_path, pricing):
    client, stubber = pricing
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"as_of": "2025-10-01", "region": REGION, "currency": "USD", "check": "https://x", "instances": [],
                                "processing": {"as_of": "2026-12-04", "estimated": True, "basis": "ESTIMATES", "instances": [
                                    {"type": C7I, "vcpus": 32, "gpu": None, "usd_per_hour": 1.714, "estimated": True}]}}))
    stubber.add_response("get_products", {"PriceList": [HOST, PROCESSING]}, request(C7I))
    assert run(path, client)[0] == 0
    processing = json.loads(path.read_text())["processing"]
    assert processing["estimated"] is False and "basis" not in processing
    assert "estimated, not published" not in offer(C7I, path).basis


def test_two_products_of_one_kind_are_refused_not_guessed(tmp_path, pricing):
    client, stubber = pricing
    path = price_file(tmp_path)
    other_host = entry(C7I, "USE1-Host:ml.c7i.8xlarge", "1.7000000000", "FFFFHOSTC7I8XL06")
    stubber.add_response("get_products", {"PriceList": [HOST, other_host, PROCESSING]}, request(C7I))
    stubber.add_response("get_products", {"PriceList": []}, request("ml.g6e.xlarge"))
    code, said = run(path, client)
    assert code == 0
    out = "\n".join(said)
    # both printed, neither used
    assert "AAAAHOSTC7I8XL01   USE1-Host:ml.c7i.8xlarge: AMBIGUOUS, not used" in out
    assert "FFFFHOSTC7I8XL06   USE1-Host:ml.c7i.8xlarge: AMBIGUOUS, not used" in out
    written = json.loads(path.read_text())
    host = written["instances"][0]
    assert (host["usd_per_hour"], host["estimated"]) == (1.5, True)
    assert "2 hosting products (AAAAHOSTC7I8XL01 USE1-Host:ml.c7i.8xlarge, FFFFHOSTC7I8XL06" in host["note"]
    assert "refused to choose" in host["note"]
    assert written["processing"]["instances"][0]["usd_per_hour"] == 1.701  # the other kind is unaffected


def test_access_denied_is_a_sentence_naming_the_iam_action_and_nothing_is_written(tmp_path, pricing, capsys):
    client, stubber = pricing
    path = price_file(tmp_path)
    before = path.read_text()
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=400,
                             service_message="User: arn:aws:iam::123456789012:user/x is not authorized to perform: "
                                             "pricing:GetProducts", expected_params=request(C7I))
    code, _ = run(path, client)
    assert code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("AWS denied the price lookup for ml.c7i.8xlarge (AccessDeniedException: User: arn:aws:iam::")
    assert "takes the IAM action pricing:GetProducts on resource \"*\"" in error
    assert error.endswith("then run python -m bench.prices again. Nothing was written.")
    assert path.read_text() == before


def test_no_credentials_is_a_sentence_naming_the_iam_action():
    message = str(bp.refused(NoCredentialsError(), "us-east-1", C7I))
    assert message.startswith("No AWS credentials were found (Unable to locate credentials).")
    assert "allowed the IAM action pricing:GetProducts" in message and message.endswith("Nothing was written.")


def test_dry_run_prints_and_writes_nothing(tmp_path, pricing):
    client, stubber = pricing
    path = price_file(tmp_path)
    before = path.read_text()
    stubber.add_response("get_products", {"PriceList": [HOST, PROCESSING]}, request(C7I))
    stubber.add_response("get_products", {"PriceList": [entry("ml.g6e.xlarge", "USE1-Host:ml.g6e.xlarge", "2.5", "GGGGHOSTG6E07")]},
                         request("ml.g6e.xlarge"))
    code, said = run(path, client, "--dry-run")
    assert code == 0 and path.read_text() == before
    out = "\n".join(said)
    assert "ml.c7i.8xlarge hosting: 1.5 -> 1.666 published" in out
    assert "ml.g6e.xlarge processing: 2.233 kept, marked estimated (no processing product)" in out
    assert out.endswith("not written")


def test_a_region_without_any_product_is_refused(tmp_path, pricing, capsys):
    client, stubber = pricing
    path = price_file(tmp_path)
    before = path.read_text()
    stubber.add_response("get_products", {"PriceList": []}, request(C7I))
    stubber.add_response("get_products", {"PriceList": []}, request("ml.g6e.xlarge"))
    assert run(path, client)[0] == 1
    assert "is the region right? Nothing was written." in capsys.readouterr().err
    assert path.read_text() == before


@pytest.mark.parametrize("attributes, kind", [
    ({"usagetype": "USE1-Host:ml.m5.xlarge"}, "hosting"),
    ({"usagetype": "EU-Host:ml.m5.xlarge", "component": "Hosting"}, "hosting"),
    ({"usagetype": "Host:ml.m5.xlarge"}, "hosting"),  # no region prefix
    ({"usagetype": "APN1-Processing:ml.m5.xlarge", "component": "processing"}, "processing"),
    ({"component": "Processing"}, "processing"),  # no usage type: the component alone
    ({"usagetype": "USE1-Processing-DW:ml.m5.xlarge"}, None),  # another product (Data Wrangler)
    ({"usagetype": "USE1-Train:ml.m5.xlarge", "component": "Training"}, None),
    ({"usagetype": "USE1-AsyncInf:ml.m5.xlarge"}, None),
    ({"usagetype": "USE1-Host:ml.m5.xlarge", "component": "AsyncInference"}, None),  # they disagree: unclear
    ({"usagetype": "USE1-Tsform:ml.m5.xlarge", "component": "Processing"}, None),
    ({}, None),
])
def test_classification_is_explicit(attributes, kind):
    found, why = bp.classify(attributes)
    assert found == kind, why
    if "component" in attributes and "usagetype" in attributes and kind is None and "Host" in attributes["usagetype"]:
        assert why.startswith("unclear")


def test_a_product_without_one_hourly_usd_price_is_not_a_figure():
    per_month = entry(C7I, "USE1-Host:ml.c7i.8xlarge", "100", "HHHH", unit="GB-Mo")
    assert bp.product_of(per_month, C7I).usd_per_hour is None
    assert "no on-demand USD price per hour (units: GB-Mo)" in bp.product_of(per_month, C7I).why
    free = entry(C7I, "USE1-Host:ml.c7i.8xlarge", "0.0000000000", "IIII")
    assert bp.product_of(free, C7I).usd_per_hour is None
    lookup = bp.Lookup(C7I, [bp.product_of(free, C7I)])
    assert lookup.pick("hosting") == (None, "hosting product IIII: usage type USE1-Host:ml.c7i.8xlarge; an on-demand price of 0 per hour")


def test_the_shipped_file_is_in_the_written_format_and_marks_its_estimates():
    shipped = json.loads(bp.PRICES.read_text())
    assert bp.render(shipped) == bp.PRICES.read_text()  # what the command writes, byte for byte
    processing = shipped["processing"]
    assert processing["estimated"] is True and all(row["estimated"] for row in processing["instances"])
    assert "python -m bench.prices" in shipped["check"] and "python -m bench.prices" in processing["check"]
    types = bp.types_in(shipped)
    assert len(types) == len(set(types)) == len(shipped["instances"]) + len(
        {r["type"] for r in processing["instances"]} - {r["type"] for r in shipped["instances"]})


def test_a_product_whose_usage_type_and_component_disagree_is_shown_and_not_used():
    odd = entry(C7I, "USE1-Processing:ml.c7i.8xlarge", "1.1", "JJJJ", component="Hosting")
    lookup = bp.Lookup(C7I, [bp.product_of(HOST, C7I), bp.product_of(odd, C7I)])
    assert lookup.pick("hosting")[0].sku == "AAAAHOSTC7I8XL01"
    assert lookup.pick("processing") == (None, "no processing product (not used, JJJJ unclear: usage type "
                                               "USE1-Processing:ml.c7i.8xlarge says processing, component 'Hosting' does not)")
    assert "JJJJ               unclear: usage type" in bp.table({C7I: lookup})
