"""EndpointScaleToZero in template.yaml: with it, the model is an inference component on an
endpoint that may scale to zero instances, with the way back from zero; without it (the default)
nothing changes; with an existing endpoint it creates nothing."""

from __future__ import annotations

import pytest

from decision_router.domain.failures import wake_up_wait
from local.cloudformation import Stack
from tests.infra.test_template_properties import CPU, GPU

ZERO_RESOURCES = {"DecisionComponentEndpointConfig", "DecisionInferenceComponent", "DecisionComponentScalableTarget",
                  "DecisionComponentScalingPolicy", "DecisionComponentWakePolicy", "DecisionComponentWakeAlarm"}
ALWAYS_ON_RESOURCES = {"DecisionEndpointConfig", "DecisionEndpointScalableTarget", "DecisionEndpointScalingPolicy"}
#: The template's EndpointMaxInstances (parameters resolve as text).
MAX = str(Stack.load().template["Parameters"]["EndpointMaxInstances"]["Default"])


def zero(parameters: dict) -> Stack:
    return Stack.load(parameters={**parameters, "EndpointScaleToZero": "true"})


@pytest.mark.parametrize("parameters", [CPU, GPU], ids=["cpu", "gpu"])
def test_scale_to_zero_deploys_the_model_as_an_inference_component_on_an_empty_variant(parameters):
    stack = zero(parameters)
    assert ZERO_RESOURCES <= set(stack.resources) and not ALWAYS_ON_RESOURCES & set(stack.resources)
    endpoint = stack.resolve(stack.properties("DecisionEndpoint"))
    assert endpoint["EndpointConfigName"] == stack.get_att("DecisionComponentEndpointConfig", "EndpointConfigName")

    config = stack.resolve(stack.properties("DecisionComponentEndpointConfig"))
    # With inference components the endpoint config, not the model, carries the execution role.
    assert config["ExecutionRoleArn"] == stack.get_att("DecisionModelRole", "Arn")
    (variant,) = config["ProductionVariants"]
    assert "ModelName" not in variant and variant["VariantName"] == "AllTraffic"
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": MAX}
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}

    component = stack.resolve(stack.properties("DecisionInferenceComponent"))
    name = stack.get_att("DecisionEndpoint", "EndpointName")
    assert (component["InferenceComponentName"], component["EndpointName"], component["VariantName"]) == (
        name, name, "AllTraffic")
    assert component["Specification"]["ModelName"] == stack.get_att("DecisionModel", "ModelName")
    assert component["Specification"]["ComputeResourceRequirements"]["MinMemoryRequiredInMb"] == "8192"
    assert component["RuntimeConfig"] == {"CopyCount": 1}

    # The same compute as the always-on endpoint: the same model, and on GPU the same pool.
    always_on = Stack.load(parameters=parameters)
    (before,) = always_on.resolve(always_on.properties("DecisionEndpointConfig"))["ProductionVariants"]
    kept = {"InstanceType", "InstancePools", "InferenceAmiVersion", "VariantInstanceProvisionTimeoutInSeconds"}
    assert {k: v for k, v in variant.items() if k in kept} == {k: v for k, v in before.items() if k in kept}
    assert stack.resolve(stack.properties("DecisionModel")) == always_on.resolve(always_on.properties("DecisionModel"))
    if parameters is GPU:  # one copy per GPU instance: each pool type has one GPU
        assert component["Specification"]["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"] == 1


def test_copies_scale_between_zero_and_the_maximum_and_a_refused_request_wakes_the_endpoint():
    stack = zero(CPU)
    name = stack.get_att("DecisionEndpoint", "EndpointName")
    target = stack.resolve(stack.properties("DecisionComponentScalableTarget"))
    assert target == {"ServiceNamespace": "sagemaker", "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
                      "ResourceId": f"inference-component/{name}", "MinCapacity": 0, "MaxCapacity": MAX}
    # Registering the target needs the component to exist.
    assert stack.template["Resources"]["DecisionComponentScalableTarget"]["DependsOn"] == "DecisionInferenceComponent"

    tracking = stack.resolve(stack.properties("DecisionComponentScalingPolicy"))
    assert tracking["PolicyType"] == "TargetTrackingScaling"
    assert tracking["ScalingTargetId"] == stack.ref("DecisionComponentScalableTarget")
    configuration = tracking["TargetTrackingScalingPolicyConfiguration"]
    assert configuration["PredefinedMetricSpecification"] == {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}

    # Target tracking cannot leave zero copies: a step policy set off by NoCapacityInvocationFailures adds one.
    wake = stack.resolve(stack.properties("DecisionComponentWakePolicy"))
    assert wake["PolicyType"] == "StepScaling" and wake["ScalingTargetId"] == stack.ref("DecisionComponentScalableTarget")
    step = wake["StepScalingPolicyConfiguration"]
    assert step["AdjustmentType"] == "ChangeInCapacity" and step["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]
    alarm = stack.resolve(stack.properties("DecisionComponentWakeAlarm"))
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SageMaker", "NoCapacityInvocationFailures")
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": name}]
    assert alarm["AlarmActions"] == [stack.ref("DecisionComponentWakePolicy")]
    # A single refused request within a minute wakes it.
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["Period"], alarm["EvaluationPeriods"]) == (
        1, "GreaterThanOrEqualToThreshold", 60, 1)


@pytest.mark.parametrize("function", ["TicketIntakeFunction", "IncidentIntakeFunction"])
def test_the_intakes_invoke_the_inference_component_by_name(function):
    stack = zero(CPU)
    env = stack.function_environment(function)
    assert env["ENDPOINT_INFERENCE_COMPONENT_NAME"] == env["DECISION_ENDPOINT_NAME"] == stack.get_att(
        "DecisionEndpoint", "EndpointName")
    invoke = stack.resolve(stack.properties(function)["Policies"][0])["Statement"][0]
    assert invoke["Action"] == "sagemaker:InvokeEndpoint"
    assert invoke["Resource"] == [stack.ref("DecisionEndpoint"), stack.ref("DecisionInferenceComponent")]


def test_a_waiting_ticket_may_be_hidden_and_comes_back_before_the_dead_letter_queue():
    stack = zero(CPU)
    statements = [s for p in stack.properties("TicketIntakeFunction")["Policies"] if "Statement" in p
                  for s in stack.resolve(p)["Statement"]]
    assert {"Effect": "Allow", "Action": "sqs:ChangeMessageVisibility",
            "Resource": stack.get_att("TicketQueue", "Arn")} in statements
    assert stack.function_environment("TicketIntakeFunction")["TICKET_QUEUE_URL"] == stack.ref("TicketQueue")
    # The receives before the last come after the GPU pool's whole provisioning timeout has passed.
    receives = stack.properties("TicketQueue")["RedrivePolicy"]["maxReceiveCount"]
    waited = sum(wake_up_wait(r) for r in range(1, receives))
    gpu = zero(GPU)
    (variant,) = gpu.resolve(gpu.properties("DecisionComponentEndpointConfig"))["ProductionVariants"]
    assert waited >= variant["VariantInstanceProvisionTimeoutInSeconds"]
    assert max(wake_up_wait(r) for r in range(1, receives + 1)) <= 43200  # SQS's longest visibility timeout


@pytest.mark.parametrize("parameters", [CPU, GPU, {"ExistingEndpointName": "decision-endpoint"}],
                         ids=["cpu", "gpu", "existing-endpoint"])
def test_without_scale_to_zero_the_endpoint_is_as_before(parameters):
    stack = Stack.load(parameters=parameters)
    assert stack.parameters["EndpointScaleToZero"] == "false"
    assert not ZERO_RESOURCES & set(stack.resources)
    for function in ("TicketIntakeFunction", "IncidentIntakeFunction"):
        assert stack.function_environment(function)["ENDPOINT_INFERENCE_COMPONENT_NAME"] == ""
        invoke = stack.resolve(stack.properties(function)["Policies"][0])["Statement"][0]
        assert isinstance(invoke["Resource"], str)
    if "ExistingEndpointName" in parameters:
        return
    assert ALWAYS_ON_RESOURCES <= set(stack.resources)
    assert stack.resolve(stack.properties("DecisionEndpoint"))["EndpointConfigName"] == stack.get_att(
        "DecisionEndpointConfig", "EndpointConfigName")
    (variant,) = stack.resolve(stack.properties("DecisionEndpointConfig"))["ProductionVariants"]
    assert variant["ModelName"] == stack.get_att("DecisionModel", "ModelName") and "ManagedInstanceScaling" not in variant


def test_scale_to_zero_applies_only_when_the_stack_creates_the_endpoint():
    stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint", "EndpointScaleToZero": "true"})
    assert not [r for r in stack.resources if stack.resources[r]["Type"].startswith(("AWS::SageMaker::", "AWS::ApplicationAutoScaling::"))]
    assert stack.function_environment("TicketIntakeFunction")["ENDPOINT_INFERENCE_COMPONENT_NAME"] == ""
