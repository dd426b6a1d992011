"""Refresh bench/data/instance-prices.json from the AWS Price List Query API.

    PYTHONPATH=contract:container:functions:. .venv/bin/python -m bench.prices [--region us-east-1] [--dry-run]

For every instance type in the file (the real-time list `instances` and the `processing` list),
one paginated query, GetProducts(ServiceCode=AmazonSageMaker, regionCode=<region>,
instanceName=<type>), returns all the SageMaker products of that type in that region: real-time
hosting, Processing, training, notebooks, batch transform, asynchronous inference... Each product
is classified explicitly (`classify`): its usage type (`USE1-Host:ml.m5.xlarge`: the part between
the region code and the colon) says `Host` (hosting) or `Processing` (processing); a `component`
attribute, where there is one, must agree. Anything else is another product and is left alone. Two
products of one kind for one type are refused, never guessed between: the table shows both and the
figure stays as it was.

The file is rewritten with each figure found as published: its on-demand USD price per
instance-hour, `"source": "AWS Price List API, AmazonSageMaker, <sku>"` and `"as_of"` (the date it
was fetched). A figure not found (no product, two products of one kind, no hourly USD price) keeps
its number, is marked `"estimated": true` with a `note` saying why, and keeps the date and source
it had. Nothing is written when a query fails (no credentials, pricing:GetProducts denied, the API
unreachable) or when the region has no SageMaker product of any of the types. `--dry-run` prints
the table and the changes without writing.

The API is public data behind signed requests: it takes AWS credentials allowed the IAM action
pricing:GetProducts, and answers in us-east-1, ap-south-1 and eu-central-1 (`--api-region`),
whatever the region of the prices. training/processing_estimate.py's `offer` and bench/cost.py read
the file; the keys they read (`usd_per_hour`, `vcpus`, `gpu`, `as_of`, `region`, `estimated`) keep
their meaning.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable

import boto3
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError, PartialCredentialsError

PRICES = Path(__file__).resolve().parent / "data" / "instance-prices.json"

SERVICE_CODE = "AmazonSageMaker"
IAM_ACTION = "pricing:GetProducts"
#: Where the Price List Query API answers (its endpoints; the prices of every region come from each).
API_REGIONS = ("us-east-1", "ap-south-1", "eu-central-1")
COMMAND = "python -m bench.prices"
PAGE_SIZE = 100

HOSTING, PROCESSING = "hosting", "processing"
KINDS = (HOSTING, PROCESSING)
#: The usage-type operations (between the region code and the colon) that are an on-demand
#: instance-hour of each kind. Anything else (Train, Notebk, Tsform, AsyncInf, Processing-DW, ...)
#: is another product.
USAGE_KINDS = {"host": HOSTING, "processing": PROCESSING}
#: The `component` attribute's values for each kind, where a product has one.
COMPONENT_KINDS = {"hosting": HOSTING, "host": HOSTING, "real-time inference": HOSTING, "processing": PROCESSING}
#: The hour units a price dimension of an instance-hour is given in.
HOUR_UNITS = {"hrs", "hr", "hour", "hours"}

_REGION_CODE = re.compile(r"^[A-Z]{2,4}\d*$")  # USE1, EU, APN1, UGW1: the usage type's region prefix
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")

#: The file's blocks: (kind, path to the block; () is the top level).
BLOCKS = ((HOSTING, ()), (PROCESSING, ("processing",)))


class PriceError(Exception):
    """A lookup that cannot go on; its message is a whole sentence for the operator."""


# ----------------------------------------------------------------------------------- one product
@dataclass(frozen=True)
class Product:
    """One SageMaker product the API returned for an instance type, as classified."""

    sku: str
    usagetype: str
    component: str | None
    kind: str | None  # HOSTING, PROCESSING or None (another product, or unclear: see why)
    usd_per_hour: float | None  # its one on-demand USD price per hour; None: see why
    why: str  # how it was classified, or why it has no kind or no price

    @property
    def unclear(self) -> bool:
        """Its usage type and component disagree: of no kind, and shown."""
        return self.kind is None and self.why.startswith("unclear")


def usage_operation(usagetype: str) -> str | None:
    """`USE1-Host:ml.m5.xlarge` -> `Host`; `Processing-DW` stays whole; None without a colon."""
    head, colon, _ = usagetype.partition(":")
    if not colon or not head:
        return None
    first, dash, rest = head.partition("-")
    return rest if dash and rest and _REGION_CODE.match(first) else head


def classify(attributes: dict[str, Any]) -> tuple[str | None, str]:
    """(kind, how it was told) of a product from its usage type and, where it has one, its
    `component`. A kind is given only where one says it and the other does not contradict it."""
    usagetype = str(attributes.get("usagetype") or "")
    operation = usage_operation(usagetype)
    by_usage = USAGE_KINDS.get(operation.lower()) if operation else None
    component = attributes.get("component")
    by_component = COMPONENT_KINDS.get(str(component).strip().lower()) if component else None
    if by_usage and component and by_component != by_usage:
        return None, f"unclear: usage type {usagetype} says {by_usage}, component {component!r} does not"
    if by_usage:
        return by_usage, f"usage type {usagetype}" + (f", component {component!r}" if component else "")
    if by_component and operation:
        return None, f"unclear: component {component!r} says {by_component}, usage type {usagetype} does not"
    if by_component:
        return by_component, f"component {component!r} (no usage type to read)"
    return None, f"another product ({operation or usagetype or 'no usage type'})"


def hourly_usd(terms: dict[str, Any]) -> tuple[float | None, str]:
    """The one on-demand USD price per hour of a product's terms, or None and why."""
    found: list[tuple[Decimal, str]] = []
    for term in ((terms or {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            if usd is None:
                continue
            try:
                found.append((Decimal(str(usd)), str(dimension.get("unit", ""))))
            except InvalidOperation:
                return None, f"an on-demand price that is not a number ({usd!r})"
    hourly = {price for price, unit in found if unit.strip().lower() in HOUR_UNITS}
    if not hourly:
        units = sorted({unit for _, unit in found})
        return None, "no on-demand USD price per hour" + (f" (units: {', '.join(units)})" if units else "")
    if len(hourly) > 1:
        return None, f"{len(hourly)} different on-demand hourly prices ({', '.join(str(p.normalize()) for p in sorted(hourly))})"
    (price,) = hourly
    if price <= 0:
        return None, f"an on-demand price of {price.normalize()} per hour"
    return float(price), "on-demand, per hour"


def product_of(item: str | dict[str, Any], instance_type: str) -> Product:
    """A PriceList entry (a JSON string, as the API returns it) read and classified."""
    data = json.loads(item) if isinstance(item, str) else item
    product = data.get("product") or {}
    attributes = product.get("attributes") or {}
    sku = str(product.get("sku") or "?")
    usagetype = str(attributes.get("usagetype") or "")
    component = attributes.get("component")
    name = attributes.get("instanceName")
    if name and name != instance_type:
        return Product(sku, usagetype, component, None, None, f"another instance type ({name})")
    kind, why = classify(attributes)
    usd, priced = hourly_usd(data.get("terms") or {}) if kind else (None, "")
    return Product(sku, usagetype, component, kind, usd, why if usd is not None or not kind else f"{why}; {priced}")


# ----------------------------------------------------------------------------------- one type
@dataclass
class Lookup:
    """What the API returned for one instance type in one region."""

    instance_type: str
    products: list[Product] = field(default_factory=list)

    def of(self, kind: str) -> list[Product]:
        return [p for p in self.products if p.kind == kind]

    def pick(self, kind: str) -> tuple[Product | None, str]:
        """The one product of `kind` with its price, or None and why (never a guess)."""
        matches = self.of(kind)
        if not matches:
            unclear = "; ".join(f"{p.sku} {p.why}" for p in self.products if p.unclear)
            return None, f"no {kind} product" + (f" (not used, {unclear})" if unclear else "" if self.products
                                                  else " (the API returned no product of this type)")
        if len(matches) > 1:
            return None, (f"{len(matches)} {kind} products ({', '.join(f'{p.sku} {p.usagetype}' for p in matches)}): "
                          "refused to choose")
        (match,) = matches
        if match.usd_per_hour is None:
            return None, f"{kind} product {match.sku}: {match.why}"
        return match, f"{match.why}, sku {match.sku}"


def source_of(product: Product) -> str:
    return f"AWS Price List API, {SERVICE_CODE}, {product.sku}"


def query(client: Any, region: str, instance_type: str) -> list[str]:
    """Every PriceList entry (a JSON string) of `instance_type` in `region`, all pages."""
    entries: list[str] = []
    paginator = client.get_paginator("get_products")
    pages = paginator.paginate(
        ServiceCode=SERVICE_CODE,
        Filters=[{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
                 {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type}],
        PaginationConfig={"PageSize": PAGE_SIZE})
    for page in pages:
        entries += page.get("PriceList", [])
    return entries


def refused(error: Exception, api_region: str, instance_type: str) -> PriceError:
    """A failed query in a whole sentence: what went wrong and which IAM action it needs."""
    tail = f"then run {COMMAND} again. Nothing was written."
    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return PriceError(
            f"No AWS credentials were found ({error}). The Price List API answers signed requests only, although the "
            f"prices are public: configure credentials (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY) for an identity allowed the IAM action {IAM_ACTION}, {tail}")
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "?")
        message = error.response.get("Error", {}).get("Message") or str(error)
        if code in ("AccessDeniedException", "AccessDenied"):
            return PriceError(
                f"AWS denied the price lookup for {instance_type} ({code}: {message}). Reading the Price List API "
                f"takes the IAM action {IAM_ACTION} on resource \"*\" (the AWS managed policy "
                f"AWSPriceListServiceFullAccess grants it): allow it for the identity that runs this command, {tail}")
        if code in ("UnrecognizedClientException", "InvalidClientTokenId", "ExpiredTokenException", "ExpiredToken",
                    "SignatureDoesNotMatch"):
            return PriceError(
                f"AWS did not accept the credentials ({code}: {message}). Renew them (an expired session, a wrong key) "
                f"for an identity allowed the IAM action {IAM_ACTION}, {tail}")
        return PriceError(
            f"The Price List API in {api_region} refused the query for {instance_type} ({code}: {message}); "
            f"it takes the IAM action {IAM_ACTION}, {tail}")
    if isinstance(error, EndpointConnectionError):
        return PriceError(
            f"The Price List API in {api_region} could not be reached ({error}). It answers in "
            f"{', '.join(API_REGIONS)} only (--api-region); check the network, {tail}")
    return PriceError(f"The price lookup for {instance_type} failed in {api_region} ({error}); {tail}")


def lookup(client: Any, region: str, types: list[str], api_region: str) -> dict[str, Lookup]:
    """Every type's products, or PriceError on the first query that fails."""
    found: dict[str, Lookup] = {}
    for instance_type in types:
        try:
            entries = query(client, region, instance_type)
        except (ClientError, BotoCoreError) as error:
            raise refused(error, api_region, instance_type) from None
        try:
            found[instance_type] = Lookup(instance_type, [product_of(entry, instance_type) for entry in entries])
        except (ValueError, TypeError, AttributeError) as error:
            raise PriceError(f"The Price List API returned an entry for {instance_type} that is not a product "
                             f"({error}); nothing was written.") from None
    return found


# ----------------------------------------------------------------------------------- the file
def block(prices: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    for key in path:
        prices = prices.get(key)  # type: ignore[assignment]
        if isinstance(prices, list):  # an old file's bare processing list
            return None
        if not isinstance(prices, dict):
            return None
    return prices


def types_in(prices: dict[str, Any]) -> list[str]:
    """Every instance type of the file, in the order it lists them (real-time list first)."""
    types: list[str] = []
    for _, path in BLOCKS:
        rows = (block(prices, path) or {}).get("instances") or []
        types += [r["type"] for r in rows if r.get("type") and r["type"] not in types]
    return types


@dataclass(frozen=True)
class Change:
    instance_type: str
    kind: str
    before: float | None
    after: float | None
    published: bool
    why: str


def refresh(prices: dict[str, Any], found: dict[str, Lookup], region: str, today: str) -> tuple[dict[str, Any], list[Change]]:
    """The file with every figure found replaced by the published one (source, as_of), and every
    figure not found kept and marked estimated (note, and the date and source it had)."""
    prices = copy.deepcopy(prices)
    changes: list[Change] = []
    for kind, path in BLOCKS:
        section = block(prices, path)
        if section is None:
            continue
        old_as_of = section.get("as_of", prices.get("as_of"))
        old_region = section.get("region", prices.get("region"))
        fetched_any = False
        for row in section.get("instances") or []:
            lookup_ = found.get(row.get("type"))
            product, why = lookup_.pick(kind) if lookup_ else (None, "not looked up")
            before = row.get("usd_per_hour")
            if product is not None:
                for stale in ("estimated", "note", "ec2_usd_per_hour"):  # the estimate's, no longer true
                    row.pop(stale, None)
                row["usd_per_hour"] = product.usd_per_hour
                row["source"] = source_of(product)
                row["as_of"] = today
                fetched_any = True
                changes.append(Change(row["type"], kind, before, product.usd_per_hour, True, why))
            else:
                row.setdefault("as_of", old_as_of)
                was = f"the figure is the file's for {old_region} as of {row['as_of']}"
                row["estimated"] = True
                row["note"] = f"not found in the AWS Price List API for {region} on {today}: {why}; {was}"
                changes.append(Change(row["type"], kind, before, before, False, why))
        rows = section.get("instances") or []
        section["estimated"] = any(r.get("estimated") for r in rows)
        if fetched_any:
            section["as_of"] = today
            section["region"] = region
            section["source"] = (f"AWS Price List API ({IAM_ACTION}, ServiceCode {SERVICE_CODE}), {region}, fetched {today} "
                                 f"by {COMMAND}: each row's source names its SKU; a row marked estimated was not found there")
        if not section["estimated"]:
            section.pop("basis", None)  # it explained estimates there are no more of
        section["instances"] = [ordered(r, ROW_KEYS) for r in rows]
        _reorder(section, SECTION_KEYS)
    return prices, changes


#: The order keys are written in (others keep theirs, after these).
SECTION_KEYS = ("as_of", "region", "currency", "offer", "estimated", "source", "basis", "check", "items_per_second_per_vcpu",
                "instances")
ROW_KEYS = ("type", "vcpus", "gpu", "usd_per_hour", "estimated", "as_of", "source", "note")


def ordered(row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {**{k: row[k] for k in keys if k in row}, **{k: v for k, v in row.items() if k not in keys}}


def _reorder(section: dict[str, Any], keys: tuple[str, ...]) -> None:
    items = ordered(section, keys)
    section.clear()
    section.update(items)


def render(prices: dict[str, Any]) -> str:
    """The file's JSON: objects indented, each instance row on one line."""

    def value(item: Any, indent: int) -> str:
        pad, inner = " " * indent, " " * (indent + 2)
        if isinstance(item, dict) and item:
            body = ",\n".join(f"{inner}{json.dumps(k)}: {value(v, indent + 2)}" for k, v in item.items())
            return "{\n" + body + "\n" + pad + "}"
        if isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            body = ",\n".join(inner + json.dumps(i, ensure_ascii=False) for i in item)
            return "[\n" + body + "\n" + pad + "]"
        return json.dumps(item, ensure_ascii=False)

    return value(prices, 0) + "\n"


# ----------------------------------------------------------------------------------- the report
def table(found: dict[str, Lookup]) -> str:
    """What the API returned of each kind: type, kind, USD/h, sku (and the other products' count)."""
    lines = [f"{'type':<18} {'kind':<11} {'USD/h':>9}  {'sku':<18} usage type / why"]
    for instance_type, lookup_ in found.items():
        for kind in KINDS:
            matches = lookup_.of(kind)
            if not matches:
                lines.append(f"{instance_type:<18} {kind:<11} {'-':>9}  {'-':<18} {lookup_.pick(kind)[1]}")
            for product in matches:
                usd = f"{product.usd_per_hour:.4f}" if product.usd_per_hour is not None else "-"
                note = product.usagetype if len(matches) == 1 and product.usd_per_hour is not None else (
                    f"{product.usagetype}: {'AMBIGUOUS, not used' if len(matches) > 1 else product.why}")
                lines.append(f"{instance_type:<18} {kind:<11} {usd:>9}  {product.sku:<18} {note}")
        unclear = [p for p in lookup_.products if p.unclear]
        for product in unclear:
            lines.append(f"{instance_type:<18} {'?':<11} {'-':>9}  {product.sku:<18} {product.why}")
        others = sorted({usage_operation(p.usagetype) or p.usagetype or "?" for p in lookup_.products
                         if p.kind is None and p not in unclear})
        if others:
            lines.append(f"{'':<18} {'(others)':<11} {'':>9}  {'':<18} {', '.join(others)}")
    return "\n".join(lines)


def describe(changes: list[Change]) -> str:
    lines = []
    for c in changes:
        before = "-" if c.before is None else f"{c.before:g}"
        if c.published:
            lines.append(f"  {c.instance_type} {c.kind}: {before} -> {c.after:g} published ({c.why})")
        else:
            lines.append(f"  {c.instance_type} {c.kind}: {before} kept, marked estimated ({c.why})")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- the command
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Refresh the SageMaker real-time inference (hosting) and Processing on-demand prices "
        f"of {PRICES.name} from the AWS Price List Query API (takes credentials allowed {IAM_ACTION}).")
    parser.add_argument("--file", type=Path, default=PRICES, help=f"the price file (default {PRICES.relative_to(PRICES.parents[2])})")
    parser.add_argument("--region", help="the region whose prices to fetch (default the file's region)")
    parser.add_argument("--api-region", default=API_REGIONS[0], choices=API_REGIONS,
                        help="where to ask the Price List API (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print what was found and what would change; write nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, *, client: Any = None, today: str | None = None,
         say: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    try:
        prices = json.loads(args.file.read_text())
    except (OSError, ValueError) as error:
        print(f"Cannot read the price file {args.file} ({error}); nothing was written.", file=sys.stderr)
        return 2
    region = args.region or prices.get("region")
    if not region or not _REGION.match(region):
        print(f"The region {region!r} is not a region code (e.g. us-east-1): pass --region.", file=sys.stderr)
        return 2
    types = types_in(prices)
    if not types:
        print(f"{args.file} lists no instance types; nothing to look up.", file=sys.stderr)
        return 2
    today = today or datetime.now(timezone.utc).date().isoformat()
    say(f"{SERVICE_CODE} on-demand prices of {len(types)} instance types in {region}, from the Price List API in "
        f"{args.api_region} ({today}):")
    try:
        if client is None:
            client = boto3.session.Session().client("pricing", region_name=args.api_region)
        found = lookup(client, region, types, args.api_region)
    except PriceError as error:
        print(str(error), file=sys.stderr)
        return 2
    except BotoCoreError as error:  # the client itself could not be made
        print(str(refused(error, args.api_region, types[0])), file=sys.stderr)
        return 2
    say(table(found))
    if not any(lookup_.products for lookup_ in found.values()):
        print(f"The Price List API returned no {SERVICE_CODE} product for any of the {len(types)} types in {region}: "
              "is the region right? Nothing was written.", file=sys.stderr)
        return 1
    updated, changes = refresh(prices, found, region, today)
    published = sum(c.published for c in changes)
    say(f"\n{published} of {len(changes)} figures published, {len(changes) - published} kept and marked estimated:")
    say(describe(changes))
    if args.dry_run:
        say(f"--dry-run: {args.file} not written")
        return 0
    args.file.write_text(render(updated))
    say(f"wrote {args.file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
