"""Preflight's checks of the account and the stack: the credentials (STS), the parameters, the stack
(CloudFormation) and who its pages reach (SNS) (`ops.preflight`)."""

from __future__ import annotations

import re

from ops.preflight_base import (
    DOCS,
    FAIL,
    OK,
    ON_CALL_DOCS,
    QUICKSTART,
    WARN,
    Checks,
    Result,
    code_of,
    is_client_error,
    message_of,
    not_checked,
)
from ops.preflight_deployment import HUMAN_PROTOCOLS, PLACEHOLDER, human_topics, invalid_value

#: Parameters a check of their own reads (the parameters check leaves them to it).
OWN_CHECK = {"DecisionImageUri", "ModelDataUrl", "OnCallEmail", "OnCallWebhookUrl", "AlarmEmail"}
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class AccountChecks(Checks):
    """credentials, parameters, stack, pages."""

    # 1. ---------------------------------------------------------------------------- credentials
    def credentials(self) -> Result:
        from botocore.exceptions import BotoCoreError, NoCredentialsError

        client = self.client("sts")
        try:
            identity = client.get_caller_identity()
        except NoCredentialsError:
            return Result(FAIL, "credentials", "No AWS credentials were found. Configure credentials (aws configure, "
                                               "AWS_PROFILE=… or aws sso login) for an identity with the read-only "
                                               f"permissions listed in {DOCS}, then run make preflight again.",
                          [f"read: {DOCS}#permissions"])
        except BotoCoreError as error:
            return Result(FAIL, "credentials", f"STS at {client.meta.endpoint_url} could not be reached ({error}). "
                                               f"Check the network and that {self.region} is a region; {DOCS} "
                                               "explains the check.", [f"read: {DOCS}#credentials"])
        except Exception as error:
            if not is_client_error(error):
                raise
            return Result(FAIL, "credentials", f"AWS refused the credentials ({code_of(error)}: {message_of(error)}). "
                                               "Refresh them (aws sso login, or new access keys) for an identity with "
                                               f"the read-only permissions listed in {DOCS}.",
                          [f"read: {DOCS}#permissions"])
        self.account = identity["Account"]
        host = client.meta.endpoint_url.removeprefix("https://")
        return Result(OK, "credentials", f"account {identity['Account']} as {identity['Arn']} ({host}).")

    # parameters ----------------------------------------------------------------------------------
    def parameters(self) -> list[Result]:
        deployment = self.deployment
        declared = deployment.declared
        problems: list[str] = []
        unknown = sorted(set(deployment.given) - set(declared))
        if unknown:
            problems.append(f"the template has no parameter {', '.join(unknown)} (CloudFormation refuses the deploy)")
        for name, value in sorted(deployment.given.items()):
            if name not in declared or name in OWN_CHECK:
                continue
            spec = declared[name]
            problem = invalid_value(name, value, spec)
            if problem:
                problems.append(problem)
        if problems:
            return [Result(FAIL, "parameters", f"{'; '.join(problems)}. Fix them in {deployment.origins[-1]} "
                                               "(the configuration reference lists each parameter's allowed values).",
                           [f"read: {QUICKSTART}#3-deploy"])]
        given = ", ".join(deployment.origins[1:]) or "nothing"
        return [Result(OK, "parameters", f"{len(deployment.given)} set in {given} over the template's defaults; "
                                         "the template accepts them.")]

    # 6. ---------------------------------------------------------------------------------- stack
    def stack(self) -> list[Result]:
        name, region = self.deployment.stack, self.region
        try:
            stacks = self.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "ValidationError" and "does not exist" in message_of(error):
                return [Result(OK, "stack", f"{name} does not exist in {region} yet; sam deploy creates it.")]
            return [not_checked("stack", f"The stack {name}", "cloudformation:DescribeStacks", error)]
        status = stacks[0]["StackStatus"]
        self.stack_exists = True
        events = f"run: aws cloudformation describe-stack-events --stack-name {name} --region {region} --max-items 20"
        if status == "ROLLBACK_COMPLETE":
            return [Result(FAIL, "stack", f"{name} is ROLLBACK_COMPLETE: its first create failed and rolled back, and "
                                          "CloudFormation cannot update such a stack. Delete it, then deploy again "
                                          f"({DOCS}#stack).",
                           [events + "   # why the create failed",
                            f"run: aws cloudformation delete-stack --stack-name {name} --region {region}"])]
        if status in ("ROLLBACK_FAILED", "DELETE_FAILED"):
            return [Result(FAIL, "stack", f"{name} is {status}: a rollback or delete left resources behind. Read its "
                                          f"events, delete what blocks it, then delete the stack ({DOCS}#stack).",
                           [events, f"run: aws cloudformation delete-stack --stack-name {name} --region {region}"])]
        if status == "UPDATE_ROLLBACK_FAILED":
            return [Result(FAIL, "stack", f"{name} is UPDATE_ROLLBACK_FAILED: it cannot be updated until its rollback "
                                          f"finishes ({DOCS}#stack).",
                           [events, f"run: aws cloudformation continue-update-rollback --stack-name {name} --region {region}"])]
        if status == "REVIEW_IN_PROGRESS":
            return [Result(WARN, "stack", f"{name} is REVIEW_IN_PROGRESS: a change set was made and never executed; "
                                          "sam deploy makes a new one.")]
        if status.endswith("_IN_PROGRESS"):
            return [Result(FAIL, "stack", f"{name} is {status}: wait until it ends before deploying ({DOCS}#stack).",
                           [f"run: aws cloudformation describe-stacks --stack-name {name} --region {region} "
                            "--query 'Stacks[0].StackStatus'"])]
        if status == "UPDATE_ROLLBACK_COMPLETE":
            return [Result(WARN, "stack", f"{name} is UPDATE_ROLLBACK_COMPLETE: its last update failed and was rolled "
                                          "back (it runs the version before); sam deploy can update it.", [events])]
        return [Result(OK, "stack", f"{name} exists ({status}); sam deploy updates it.")]

    # 5. ---------------------------------------------------------------------------------- pages
    def pages(self) -> list[Result]:
        deployment = self.deployment
        email, webhook = deployment.value("OnCallEmail"), deployment.value("OnCallWebhookUrl")
        problems = []
        for name, value in (("OnCallEmail", email), ("OnCallWebhookUrl", webhook), ("AlarmEmail", deployment.value("AlarmEmail"))):
            if not value:
                continue
            if PLACEHOLDER.search(value):
                problems.append(f"{name} is still the placeholder {value}")
            elif name.endswith("Email") and not EMAIL.match(value):
                problems.append(f"{name}={value} is not an e-mail address")
            elif name == "OnCallWebhookUrl" and not value.startswith("https://"):
                problems.append(f"{name}={value} is not an https:// URL")
        if not email and not webhook:
            problems.append("neither OnCallEmail nor OnCallWebhookUrl is set, and the template refuses a stack whose "
                            "escalations reach nobody")
        if problems:
            return [Result(FAIL, "pages", f"{'; '.join(problems)}. Set who is paged ({ON_CALL_DOCS}).", [f"read: {ON_CALL_DOCS}"])]
        if not self.stack_exists:
            who = " and ".join(v for v in (email, webhook) if v)
            return [Result(OK, "pages", f"{who} will be subscribed to the on-call topic by the deploy; each must confirm "
                                        "the subscription SNS sends (run make preflight again after the deploy to see it).")]
        return self._subscriptions()

    def _subscriptions(self) -> list[Result]:
        stack = self.deployment.stack
        topics = human_topics(self.deployment.template)
        try:
            resources = self.client("cloudformation").describe_stack_resources(StackName=stack)["StackResources"]
        except Exception as error:
            if not is_client_error(error):
                raise
            return [not_checked("pages", "The on-call subscriptions", "cloudformation:DescribeStackResources", error)]
        arns = {r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in resources
                if r.get("ResourceType") == "AWS::SNS::Topic" and r["LogicalResourceId"] in topics}
        if not arns:
            return [Result(WARN, "pages", f"the stack {stack} has none of the topics {', '.join(sorted(topics))} yet; "
                                          "the deploy creates them and subscribes the on-call.")]
        sns = self.client("sns")
        results: list[Result] = []
        for logical, arn in sorted(arns.items()):
            try:
                subscriptions = [s for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=arn)
                                 for s in page.get("Subscriptions", [])]
            except Exception as error:
                if not is_client_error(error):
                    raise
                results.append(not_checked("pages", f"The subscriptions of {logical}", "sns:ListSubscriptionsByTopic", error))
                continue
            people = [s for s in subscriptions if s.get("Protocol") in HUMAN_PROTOCOLS]
            pending = [s for s in people if s.get("SubscriptionArn") == "PendingConfirmation"]
            confirmed = [s for s in people if s not in pending]
            shown = ", ".join(f"{s.get('Protocol')} {s.get('Endpoint')}" for s in pending)
            resend = [f"run: aws sns subscribe --topic-arn {arn} --protocol {s.get('Protocol')} "
                      f"--notification-endpoint {s.get('Endpoint')} --region {self.region}   # sends the confirmation again"
                      for s in pending if s.get("Protocol") in ("email", "email-json")]
            if not people:
                results.append(Result(FAIL, "pages", f"{logical} has no e-mail or HTTPS subscriber: its pages reach nobody. "
                                                     f"Deploy with OnCallEmail and/or OnCallWebhookUrl ({ON_CALL_DOCS}).",
                                      [f"read: {ON_CALL_DOCS}"]))
            elif not confirmed:
                results.append(Result(FAIL, "pages", f"{logical}: every subscription is pending confirmation ({shown}), "
                                                     "so its pages reach nobody. Each recipient must open the link in SNS's "
                                                     "\"Subscription Confirmation\" message (an HTTPS endpoint must visit its "
                                                     f"SubscribeURL) ({ON_CALL_DOCS}).", [*resend, f"read: {ON_CALL_DOCS}"]))
            elif pending:
                results.append(Result(WARN, "pages", f"{logical}: {len(confirmed)} confirmed, {len(pending)} pending "
                                                     f"confirmation ({shown}); a pending one receives nothing until "
                                                     f"its recipient confirms ({ON_CALL_DOCS}).", resend))
            else:
                subscribers = ", ".join(f"{s.get('Protocol')} {s.get('Endpoint')}" for s in confirmed)
                results.append(Result(OK, "pages", f"{logical}: {len(confirmed)} confirmed ({subscribers})."))
        return results
