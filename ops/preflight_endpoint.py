"""Preflight's checks of what the endpoint needs: the SageMaker quotas (Service Quotas), an existing
endpoint (SageMaker), the image (ECR) and the model archive (S3) (`ops.preflight`)."""

from __future__ import annotations

import re
from typing import Any

from ops.preflight_base import (
    DOCS,
    FAIL,
    IMAGE_DOCS,
    MODEL_DOCS,
    OK,
    QUICKSTART,
    WARN,
    Checks,
    Result,
    code_of,
    is_client_error,
    message_of,
    not_checked,
)
from ops.preflight_deployment import PLACEHOLDER, endpoint_instance_types

ECR_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


def quota_increase_command(code: str, desired: int, region: str) -> str:
    return (f"aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code {code} "
            f"--desired-value {desired} --region {region}")


class EndpointChecks(Checks):
    """quotas, endpoint, image, model."""

    # 2. --------------------------------------------------------------------------------- quotas
    def quotas(self) -> list[Result]:
        wanted: list[tuple[str, int, int, str]] = []  # (quota name, needed, scales to, what needs it)
        deployment = self.deployment
        cpu_type, gpu_pool = endpoint_instance_types(deployment)
        maximum = deployment.number("EndpointMaxInstances", 1)
        minimum = 1 if deployment.scale_to_zero else deployment.number("EndpointMinInstances", 1)
        starts = ("the endpoint starts with 1 (EndpointScaleToZero)" if deployment.scale_to_zero
                  else f"the endpoint starts with {minimum} (EndpointMinInstances)")
        if not deployment.existing_endpoint:
            endpoint_types = gpu_pool if deployment.gpu else [cpu_type or deployment.value("CpuInstanceType")]
            for instance_type in endpoint_types:
                wanted.append((f"{instance_type} for endpoint usage", minimum, max(minimum, maximum), starts))
        processing, count = self.processing_instance_type, self.processing_instances
        wanted.append((f"{processing} for processing job usage", count, count,
                       f"make fit-history ON=sagemaker INSTANCES={count} runs {count}"))
        try:
            quotas = self._quotas({name for name, *_ in wanted})
        except Exception as error:
            if not is_client_error(error):
                raise
            return [not_checked("quotas", "The SageMaker quotas", "servicequotas:ListServiceQuotas", error)]
        pool_ok = any((quotas.get(f"{t} for endpoint usage") or {}).get("Value", 0) >= minimum for t in gpu_pool)
        results: list[Result] = []
        for name, needed, scales_to, why in wanted:
            endpoint = name.endswith("for endpoint usage")
            results.append(self._quota_result(name, quotas.get(name), needed, scales_to, why, endpoint=endpoint,
                                              pool=gpu_pool if endpoint and deployment.gpu else None, pool_ok=pool_ok))
        return results

    def _quotas(self, names: set[str]) -> dict[str, dict[str, Any]]:
        """The account's applied SageMaker quotas of these names; the defaults of those it has none applied."""
        client = self.client("service-quotas")
        found: dict[str, dict[str, Any]] = {}
        for page in client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
            for quota in page.get("Quotas", []):
                if quota.get("QuotaName") in names:
                    found[quota["QuotaName"]] = quota
        if names - set(found):
            for page in client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode="sagemaker"):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") in names and quota["QuotaName"] not in found:
                        found[quota["QuotaName"]] = {**quota, "default": True}
        return found

    def _quota_result(self, name: str, quota: dict[str, Any] | None, needed: int, scales_to: int, why: str, *,
                      endpoint: bool, pool: list[str] | None, pool_ok: bool) -> Result:
        region = self.region
        if quota is None:
            return Result(WARN, "quota", f"SageMaker lists no quota \"{name}\" in {region}: the instance type may not be "
                                         f"offered there. Check it in the Service Quotas console ({DOCS}#quotas).")
        value = int(quota.get("Value", 0))
        code = quota.get("QuotaCode", "?")
        shown = f"\"{name}\" ({code}) is {value}{' (the default)' if quota.get('default') else ''}"
        command = f"run: {quota_increase_command(code, scales_to, region)}"
        if not quota.get("Adjustable", True):
            command += "   # not adjustable: ask AWS Support"
        request = f"Request the increase and deploy once it is granted ({DOCS}#quotas)."
        if pool is not None:
            where = f"GPU pool priority {pool.index(name.split(' ')[0]) + 1} of {len(pool)}"
            if value >= scales_to:
                return Result(OK, "quota", f"{shown}: enough for the {where} ({scales_to} at most).")
            if value >= needed:
                return Result(WARN, "quota", f"{shown} ({where}): {why}, but auto scaling stops at {value} of "
                                             f"{scales_to} (EndpointMaxInstances) on this type.", [command])
            if pool_ok:
                return Result(WARN, "quota", f"{shown} ({where}), but {why}. Another type of the pool has the quota; "
                                             "SageMaker falls back along the pool on missing capacity, so raise this "
                                             "one for the endpoint to run on it.", [command])
            return Result(FAIL, "quota", f"{shown} ({where}), but {why}, and no type of the pool has that quota: the "
                                         f"deploy would fail. {request}", [command])
        if value >= scales_to:
            return Result(OK, "quota", f"{shown}: enough for {scales_to}"
                                       f"{' (EndpointMaxInstances)' if endpoint and scales_to > needed else ''}.")
        if value >= needed:
            return Result(WARN, "quota", f"{shown}: {why}, but auto scaling stops at {value} of {scales_to} "
                                         "(EndpointMaxInstances).", [command])
        if endpoint:
            return Result(FAIL, "quota", f"{shown}, but {why}: the deploy would fail. {request}", [command])
        if self.processing_named:
            return Result(FAIL, "quota", f"{shown}, but {why}: the job would fail. Request the increase before "
                                         f"running it ({DOCS}#quotas).", [command])
        return Result(WARN, "quota", f"{shown}, but {why} (not needed to deploy).", [command])

    # ExistingEndpointName ---------------------------------------------------------------------
    def endpoint(self) -> list[Result]:
        name = self.deployment.existing_endpoint
        if not name:
            return []
        try:
            described = self.client("sagemaker").describe_endpoint(EndpointName=name)
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "ValidationException" and "Could not find" in message_of(error):
                return [Result(FAIL, "endpoint", f"ExistingEndpointName={name}: there is no such endpoint in "
                                                 f"{self.region}. Name a running endpoint, or leave the parameter empty "
                                                 f"for the stack to create one ({QUICKSTART}#3-deploy).",
                               [f"run: aws sagemaker list-endpoints --region {self.region}"])]
            return [not_checked("endpoint", f"The endpoint {name}", "sagemaker:DescribeEndpoint", error)]
        status = described.get("EndpointStatus", "?")
        if status != "InService":
            return [Result(WARN, "endpoint", f"ExistingEndpointName={name} is {status}, not InService.")]
        return [Result(OK, "endpoint", f"ExistingEndpointName={name} is InService; the stack creates no SageMaker "
                                       "endpoint, so its image and model are not checked.")]

    # 3. ---------------------------------------------------------------------------------- image
    def image(self) -> list[Result]:
        if self.deployment.existing_endpoint:
            return []
        uri = self.deployment.value("DecisionImageUri")
        push = f"read: {IMAGE_DOCS}"
        if not uri:
            return [Result(FAIL, "image", "DecisionImageUri is empty, and the template needs it unless "
                                          f"ExistingEndpointName is set. Build and push the image ({IMAGE_DOCS}).", [push])]
        if PLACEHOLDER.search(uri):
            return [Result(FAIL, "image", f"DecisionImageUri is still the placeholder {uri}. Build and push the image, "
                                          f"then give its digest URI ({IMAGE_DOCS}).", [push])]
        registry, _, rest = uri.partition("/")
        digest: str | None = None
        tag: str | None = None
        if "@" in rest:
            repository, _, digest = rest.partition("@")
            image_id = {"imageDigest": digest}
        else:
            repository, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
            image_id = {"imageTag": tag}
        match = ECR_REGISTRY.match(registry)
        if not match or not repository:
            return [Result(FAIL, "image", f"DecisionImageUri {uri} is not an image in a private ECR registry "
                                          f"(ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY@sha256:…), which "
                                          f"SageMaker pulls from. Push it to ECR in {self.region} ({IMAGE_DOCS}).", [push])]
        account, image_region = match["account"], match["region"]
        if image_region != self.region:
            target = f"{account}.dkr.ecr.{self.region}.amazonaws.com/{repository}"
            return [Result(FAIL, "image", f"DecisionImageUri is in ECR of {image_region}, but the endpoint in "
                                          f"{self.region} pulls from its own region's registry. Push (or replicate) "
                                          f"the image to {target} and deploy with that URI ({IMAGE_DOCS}).", [push])]
        try:
            details = self.client("ecr").describe_images(registryId=account, repositoryName=repository,
                                                         imageIds=[image_id])["imageDetails"]
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) == "RepositoryNotFoundException":
                return [Result(FAIL, "image", f"There is no ECR repository {repository} in {account}/{self.region}. "
                                              f"Create it and push the image ({IMAGE_DOCS}).", [push])]
            if code_of(error) == "ImageNotFoundException":
                what = f"digest {digest}" if digest else f"tag {tag}"
                return [Result(FAIL, "image", f"{repository} in {self.region} has no image of {what}. Push the image "
                                              f"and deploy by the digest the push prints ({IMAGE_DOCS}).",
                               [push, f"run: aws ecr describe-images --repository-name {repository} --region {self.region} "
                                      "--query 'sort_by(imageDetails,&imagePushedAt)[-3:].[imageDigest,imageTags]'"])]
            return [not_checked("image", f"The image {uri}", "ecr:DescribeImages", error)]
        detail = details[0]
        found = detail["imageDigest"]
        tags = detail.get("imageTags", [])
        pushed = detail.get("imagePushedAt")
        about = (f" (tags {', '.join(tags)}" if tags else " (untagged") + (f", pushed {pushed:%Y-%m-%d %H:%M})" if pushed else ")")
        results: list[Result] = []
        if tag is not None:
            pinned = f"{registry}/{repository}@{found}"
            pattern = self.deployment.declared.get("DecisionImageUri", {}).get("AllowedPattern")
            refused = bool(pattern) and re.fullmatch(pattern, uri) is None
            results.append(Result(FAIL if refused else WARN, "image",
                                  f"DecisionImageUri names the image by its tag {tag}, which can move to another image"
                                  f"{' and which the template refuses' if refused else ''}. Deploy by its digest: "
                                  f"DecisionImageUri={pinned} ({IMAGE_DOCS}).", [f"pin: DecisionImageUri={pinned}"]))
        else:
            results.append(Result(OK, "image", f"{repository}@{found[:19]}… is in ECR of {self.region}{about}."))
        compute = "GPU" if self.deployment.gpu else "CPU"
        flavours = {"cuda" if "cuda" in t.lower() else "cpu" for t in tags if "cuda" in t.lower() or "cpu" in t.lower()}
        if flavours and flavours != ({"cuda"} if self.deployment.gpu else {"cpu"}):
            results.append(Result(WARN, "image", f"the image is tagged {', '.join(tags)} but EndpointCompute={compute}: "
                                                 f"the CPU endpoint runs the cpu image, the GPU pool the cuda one ({IMAGE_DOCS})."))
        return results

    # 4. ---------------------------------------------------------------------------------- model
    def model(self) -> list[Result]:
        if self.deployment.existing_endpoint:
            return []
        url = self.deployment.value("ModelDataUrl")
        upload = (f"run: python container/package_model.py MODEL.gguf --sha256 <its sha256> --output model.tar.gz "
                  f"&& aws s3 cp model.tar.gz {url or 's3://BUCKET/decision-router/model.tar.gz'} --region {self.region}")
        read = f"read: {MODEL_DOCS}"
        if not url:
            return [Result(FAIL, "model", "ModelDataUrl is empty, and the template needs it unless ExistingEndpointName "
                                          f"is set. Package a GGUF as model.tar.gz and upload it ({MODEL_DOCS}).", [read])]
        if PLACEHOLDER.search(url):
            return [Result(FAIL, "model", f"ModelDataUrl is still the placeholder {url}. Package a GGUF as model.tar.gz, "
                                          f"upload it and give its s3:// URL ({MODEL_DOCS}).", [read])]
        found = re.fullmatch(r"s3://([a-z0-9.-]{3,63})/(.+)", url)
        if not found:
            return [Result(FAIL, "model", f"ModelDataUrl {url} is not s3://BUCKET/KEY/model.tar.gz ({MODEL_DOCS}).", [read])]
        bucket, key = found[1], found[2]
        s3 = self.client("s3")
        try:
            bucket_region = s3.head_bucket(Bucket=bucket).get("BucketRegion")
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) in ("404", "NoSuchBucket", "NotFound"):
                return [Result(FAIL, "model", f"The bucket {bucket} does not exist. Create it in {self.region} and "
                                              f"upload the archive ({MODEL_DOCS}).",
                               [f"run: aws s3 mb s3://{bucket} --region {self.region}", upload])]
            bucket_region = None  # 403 without s3:ListBucket: the object's HEAD still tells
        if bucket_region and bucket_region != self.region:
            return [Result(FAIL, "model", f"The bucket {bucket} is in {bucket_region}, but SageMaker in {self.region} reads "
                                          f"the model from a bucket of its own region. Upload the archive to a bucket in "
                                          f"{self.region} and deploy with that ModelDataUrl ({MODEL_DOCS}).", [read])]
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except Exception as error:
            if not is_client_error(error):
                raise
            if code_of(error) in ("404", "NoSuchKey", "NotFound"):
                return [Result(FAIL, "model", f"There is no object {url}. Package the GGUF as model.tar.gz and upload it "
                                              f"there ({MODEL_DOCS}).", [upload])]
            return [not_checked("model", f"The archive {url}", "s3:GetObject on it (S3 also answers 403 for a missing "
                                                                "object when s3:ListBucket is not allowed)", error)]
        size = int(head.get("ContentLength", 0))
        modified = head.get("LastModified")
        when = f", uploaded {modified:%Y-%m-%d %H:%M}" if modified else ""
        if size == 0:
            return [Result(FAIL, "model", f"{url} is empty. Upload the packaged archive there again ({MODEL_DOCS}).", [upload])]
        return [Result(OK, "model", f"{url} is there ({_size(size)}{when}).")]


def _size(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return str(size)

