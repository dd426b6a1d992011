
import pytest

from decision_contract import SingleDecisionResponse
from decision_router.adapters.endpoint import DecisionEndpoint
from decision_router.config import ConfigError, Settings
from decision_router.domain.failures import EndpointFailure
from decision_router.domain.model_requests import build_decisions
from decision_router.domain.policies import load_policy
from decision_router.items import parse_item
from tests.functions.conftest import NO_CAPACITY_MESSAGE, make_result


def test_settings_from_the_interface_variables():
    s = Settings.from_env({"DECISION_ENDPOINT_NAME": "ep", "DESTINATION_QUEUES": '{"billing": "https://q/b"}',
                           "REVIEW_TIMEOUT_SECONDS": "3600", "ENDPOINT_READ_TIMEOUT_SECONDS": "75"})
    assert (s.endpoint_name, s.destination_queues, s.review_timeout_seconds) == ("ep", {"billing": "https://q/b"}, 3600)
    assert (s.endpoint_read_timeout_seconds, s.endpoint_max_attempts) == (75.0, 4)


@pytest.mark.parametrize("env, message", [
    ({"DESTINATION_QUEUES": "billing=https://q"}, "DESTINATION_QUEUES is not JSON"),
    ({"DESTINATION_QUEUES": '["https://q"]'}, "must be a JSON object of target"),
    ({"ENDPOINT_MAX_ATTEMPTS": "many"}, "ENDPOINT_MAX_ATTEMPTS='many': not a int"),
    ({"REVIEW_TIMEOUT_SECONDS": "0"}, "REVIEW_TIMEOUT_SECONDS='0': must be at least 1"),
])
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_settings_read_the_process_environment(monkeypatch):
    monkeypatch.setenv("DESTINATION_QUEUES", '{"billing": "https://q/b", "sales": "https://q/s"}')
    monkeypatch.setenv("ENDPOINT_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("ENDPOINT_READ_TIMEOUT_SECONDS", " 12.5 ")
    monkeypatch.setenv("POLICY_NAME", "  ")  # blank: unset
    s = Settings.from_env()
    assert s.destination_queues == {"billing": "https://q/b", "sales": "https://q/s"}
    assert (s.endpoint_max_attempts, s.endpoint_read_timeout_seconds, s.policy_name) == (2, 12.5, "")
    monkeypatch.setenv("ENDPOINT_READ_TIMEOUT_SECONDS", "0.5")
    with pytest.raises(ConfigError, match=r"^ENDPOINT_READ_TIMEOUT_SECONDS='0.5': must be at least 1$"):
        Settings.from_env()
    monkeypatch.setenv("DESTINATION_QUEUES", "billing=https://q")
    with pytest.raises(ConfigError, match="DESTINATION_QUEUES is not JSON"):
        Settings.from_env()


def test_missing_required_settings_are_listed():
    with pytest.raises(ConfigError, match="not set: DECISION_ENDPOINT_NAME, ROUTING_STATE_MACHINE_ARN"):
        Settings.from_env({}).require("endpoint_name", "state_machine_arn")


@pytest.fixture
def decisions(ticket_data):
    return build_decisions(load_policy("support-ticket"), parse_item("ticket", ticket_data))


@pytest.mark.parametrize("raw, message", [
    (b"<html>502 Bad Gateway</html>", "not a decision response"),
    (b'{"result": {"id": "queue"}}', "not a decision response"),
    (SingleDecisionResponse(result=make_result("other", ["a", "b"], [1.0, 0.0])).model_dump_json().encode(),
     "answered decision ids \\['other'\\], asked \\['queue'\\]"),
])
def test_unusable_answers_are_bad_responses(decisions, raw, message):
    with pytest.raises(EndpointFailure, match=message) as info:
        DecisionEndpoint._parse(raw, decisions, 1)
    assert info.value.kind == "bad_response" and not info.value.retryable


def test_client_has_the_agreed_timeouts_and_retry_mode():
    config = DecisionEndpoint("ep", read_timeout=70, max_attempts=4).client.meta.config
    assert config.read_timeout == 70 and config.connect_timeout == 5
    assert config.retries["mode"] == "adaptive"


def test_a_busy_endpoint_is_retried_no_sooner_than_its_retry_after(decisions):
    """The container answers 503 busy with Retry-After when the model context stays taken; a
    retry before then would only be refused again."""
    import io

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import ANY, Stubber

    client = boto3.client("sagemaker-runtime", region_name="us-east-1")
    slept: list[float] = []
    endpoint = DecisionEndpoint("ep", client=client, sleep=slept.append)
    params = {"EndpointName": "ep", "Body": ANY, "ContentType": "application/json", "Accept": "application/json"}
    option_ids = [o.id for o in decisions[0].options]
    raw = SingleDecisionResponse(result=make_result("queue", option_ids, [1.0, 0, 0, 0, 0])).model_dump_json().encode()
    with Stubber(client) as stubber:
        stubber.add_client_error("invoke_endpoint", service_error_code="ServiceUnavailable", http_status_code=503,
                                 service_message="the model is busy", expected_params=params,
                                 response_meta={"HTTPHeaders": {"retry-after": "3"}})
        stubber.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw))}, params)
        assert list(endpoint.decide(decisions)) == ["queue"]
    (delay,) = slept
    assert 3 <= delay <= 3 + endpoint.base_delay


# --- scale to zero: the inference component and its "no capacity" answer ------------------------

def stubbed(inference_component: str = ""):
    import boto3
    from botocore.stub import ANY, Stubber

    client = boto3.client("sagemaker-runtime", region_name="us-east-1")
    endpoint = DecisionEndpoint("ep", inference_component=inference_component, client=client, sleep=lambda s: None)
    params = {"EndpointName": "ep", "Body": ANY, "ContentType": "application/json", "Accept": "application/json"}
    if inference_component:
        params["InferenceComponentName"] = inference_component
    return endpoint, Stubber(client), params


def test_settings_name_the_inference_component_only_when_set():
    assert Settings.from_env({"ENDPOINT_INFERENCE_COMPONENT_NAME": "decision-ic"}).inference_component_name == "decision-ic"
    assert Settings.from_env({"ENDPOINT_INFERENCE_COMPONENT_NAME": ""}).inference_component_name == ""


@pytest.mark.parametrize("component", ["decision-ic", ""], ids=["inference-component", "plain-endpoint"])
def test_requests_name_the_inference_component_when_there_is_one(decisions, component):
    """The Stubber matches the parameters exactly: with a component every request names it, without
    one no InferenceComponentName is sent (a plain endpoint refuses it)."""
    import io

    from botocore.response import StreamingBody

    endpoint, stubber, params = stubbed(component)
    option_ids = [o.id for o in decisions[0].options]
    raw = SingleDecisionResponse(result=make_result("queue", option_ids, [1.0, 0, 0, 0, 0])).model_dump_json().encode()
    with stubber:
        stubber.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw))}, params)
        assert list(endpoint.decide(decisions)) == ["queue"]
        stubber.assert_no_pending_responses()


def test_no_capacity_is_its_own_kind_and_not_retried(decisions):
    """Waking from zero takes minutes: retrying within seconds only adds failed requests."""
    endpoint, stubber, params = stubbed("decision-ic")
    with stubber:
        stubber.add_client_error("invoke_endpoint", service_error_code="ValidationError", http_status_code=400,
                                 service_message=NO_CAPACITY_MESSAGE, expected_params=params)
        with pytest.raises(EndpointFailure) as info:
            endpoint.decide(decisions)
        stubber.assert_no_pending_responses()
    failure = info.value
    assert (failure.kind, failure.attempts, failure.retryable, failure.status_code) == ("no_capacity", 1, False, 400)
    assert failure.message.startswith("the endpoint has scaled to zero instances and is waking up")
    assert "Inference Component has no capacity" in failure.message


def test_other_validation_errors_stay_validation_errors(decisions):
    endpoint, stubber, params = stubbed()
    with stubber:
        stubber.add_client_error("invoke_endpoint", service_error_code="ValidationError", http_status_code=400,
                                 service_message="Endpoint ep of account 123456789012 not found.", expected_params=params)
        with pytest.raises(EndpointFailure) as info:
            endpoint.decide(decisions)
    assert info.value.kind == "validation" and "not found" in info.value.message
