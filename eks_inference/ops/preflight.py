"""``preflight``: is the account ready for the platform? Every check is one pass/fail row.

Per deployment: its weights are complete under ``weights.prefix`` (the upload manifest is there
and every object it lists exists with its size), a Neuron deployment that may not compile
at start-up finds a completed compile at exactly the prefix serving reads, and each LoRA
adapter's ``adapter_config.json`` is there and fits the deployment
(:mod:`eks_inference.ops.adapter_configs`). Per account: the
model bucket exists, the region offers each node pool's instance types in the cluster's zones,
and the EC2 vCPU quotas cover every pool at its ``max_size``. A failing row names exactly what
is missing. Region-wide checks always cover every node pool, since the cluster creates them all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.ops.adapter_configs import check_adapter_configs
from eks_inference.ops.aws.errors import (
    describe_error,
    error_code,
    from_web_page,
    is_aws_error,
    is_not_found,
)
from eks_inference.ops.quotas import SERVICE_CODE, VcpuQuota, vcpu_quota
from eks_inference.ops.text import format_bytes, plural
from eks_inference.ops.upload.manifest import (
    ManifestTooLargeError,
    UploadManifest,
    manifest_key,
    read_manifest,
)
from eks_inference.specification.artifacts import artifact_prefix, completion_marker_key
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec

Status = Literal["PASS", "FAIL", "SKIP"]
# Keys named in a failing row before "(+N more)".
_MAX_LISTED = 10
ACCOUNT_SCOPE = "account"


@dataclass(frozen=True)
class Check:
    """One row: what was checked, for which deployment or pool, and the result."""

    scope: str
    check: str
    status: Status
    detail: str

    @property
    def failed(self) -> bool:
        """True when the check failed (SKIP is not a failure)."""
        return self.status == "FAIL"


@dataclass(frozen=True)
class PreflightClients:
    """The AWS clients preflight uses, all in the platform's region."""

    s3: Any
    ec2: Any
    service_quotas: Any


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")


def _list_sizes(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            sizes[item["Key"]] = int(item["Size"])
    return sizes


def check_bucket(s3: Any, bucket: str) -> Check:
    """The model bucket exists and these credentials may list it."""
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception as error:
        if not is_aws_error(error):
            raise
        if from_web_page(error):
            detail = f"bucket {bucket}: {describe_error(error, 'S3')}"
        elif is_not_found(error):
            detail = f"bucket {bucket} does not exist; deploy the stack (it creates the bucket)"
        elif error_code(error) == "403":
            detail = f"access denied to bucket {bucket} (needs s3:ListBucket)"
        else:
            detail = f"bucket {bucket}: {describe_error(error, 'S3')}"
        return Check(ACCOUNT_SCOPE, "model bucket", "FAIL", detail)
    return Check(ACCOUNT_SCOPE, "model bucket", "PASS", f"s3://{bucket} exists")


def _manifest_problems(
    manifest: UploadManifest, sizes: dict[str, int], bucket: str, prefix: str
) -> list[str]:
    missing = [f.key for f in manifest.files if prefix + f.key not in sizes]
    wrong = [
        f"{f.key} (manifest {f.size} B, bucket {sizes[prefix + f.key]} B)"
        for f in manifest.files
        if prefix + f.key in sizes and sizes[prefix + f.key] != f.size
    ]
    problems = []
    if missing:
        problems.append(
            f"{len(missing)} of {len(manifest.files)} objects listed in the manifest are "
            f"missing under s3://{bucket}/{prefix}: {_listed(missing)}"
        )
    if wrong:
        problems.append(f"size differs: {_listed(wrong)}")
    return problems


def _read_manifest(s3: Any, bucket: str, prefix: str) -> tuple[UploadManifest | None, str | None]:
    """The manifest under ``prefix``, or None and why it could not be used."""
    uri = f"s3://{bucket}/{manifest_key(prefix)}"
    try:
        manifest = read_manifest(s3, bucket, manifest_key(prefix))
    except ValidationError as error:
        return None, f"{uri} is not a valid upload manifest ({error.error_count()} errors)"
    except ManifestTooLargeError as error:
        return None, str(error)
    except Exception as error:
        if not is_aws_error(error):
            raise
        return None, f"cannot read {uri}: {describe_error(error, 'S3')}"
    if manifest is None:
        return None, f"{uri} missing"
    return manifest, None


def check_weights(s3: Any, bucket: str, spec: ModelDeploymentSpec) -> Check:
    """The weights at ``spec.weights.prefix``: manifest present, every listed object intact."""
    prefix = spec.weights.prefix
    manifest, problem = _read_manifest(s3, bucket, prefix)
    if manifest is None:
        hint = f"; upload them with: eks-inference upload DIR s3://{bucket}/{prefix}"
        return Check(spec.name, "weights", "FAIL", f"{problem}{hint}")
    try:
        sizes = _list_sizes(s3, bucket, prefix)
    except Exception as error:
        if not is_aws_error(error):
            raise
        return Check(
            spec.name,
            "weights",
            "FAIL",
            f"cannot list s3://{bucket}/{prefix}: {describe_error(error, 'S3')}",
        )
    problems = _manifest_problems(manifest, sizes, bucket, prefix)
    if problems:
        return Check(spec.name, "weights", "FAIL", "; ".join(problems))
    return Check(
        spec.name,
        "weights",
        "PASS",
        f"s3://{bucket}/{prefix}: {plural(len(manifest.files), 'file')}, "
        f"{format_bytes(manifest.total_bytes)}, uploaded {manifest.created:%Y-%m-%d %H:%M} UTC",
    )


def check_artifacts(s3: Any, bucket: str, spec: ModelDeploymentSpec) -> Check | None:
    """Compiled artifacts of a Neuron deployment, at exactly the prefix serving reads.

    None for GPU deployments; SKIP when the deployment may compile at start-up. The
    completion marker is written last by whatever produced the artifacts, so its presence
    means the set is whole; an upload manifest there, when present, is checked as well.
    """
    if not spec.on_neuron:
        return None
    if spec.neuron_options.allow_compile_at_startup:
        return Check(
            spec.name,
            "compiled artifacts",
            "SKIP",
            "allow_compile_at_startup: each pod compiles at start-up (development only)",
        )
    prefix = artifact_prefix(spec)
    marker = completion_marker_key(spec)
    try:
        sizes = _list_sizes(s3, bucket, prefix)
    except Exception as error:
        if not is_aws_error(error):
            raise
        return Check(
            spec.name,
            "compiled artifacts",
            "FAIL",
            f"cannot list s3://{bucket}/{prefix}: {describe_error(error, 'S3')}",
        )
    if marker not in sizes:
        found = f"{plural(len(sizes), 'object')} there" if sizes else "nothing there"
        return Check(
            spec.name,
            "compiled artifacts",
            "FAIL",
            f"completion marker s3://{bucket}/{marker} missing ({found}); compile "
            f"{spec.name} and upload the artifacts to s3://{bucket}/{prefix}",
        )
    payload = {k: v for k, v in sizes.items() if k not in (marker, manifest_key(prefix))}
    if not payload:
        return Check(
            spec.name,
            "compiled artifacts",
            "FAIL",
            f"s3://{bucket}/{prefix} has a completion marker but no artifacts",
        )
    if manifest_key(prefix) in sizes:
        manifest, problem = _read_manifest(s3, bucket, prefix)
        problems = (
            [problem] if manifest is None else _manifest_problems(manifest, sizes, bucket, prefix)
        )
        if any(problems):
            return Check(spec.name, "compiled artifacts", "FAIL", "; ".join(map(str, problems)))
    return Check(
        spec.name,
        "compiled artifacts",
        "PASS",
        f"s3://{bucket}/{prefix}: {plural(len(payload), 'object')}, "
        f"{format_bytes(sum(payload.values()))}, completion marker present",
    )


def region_zones(ec2: Any) -> list[str]:
    """The region's availability zones (Local and Wavelength Zones left out)."""
    response = ec2.describe_availability_zones()
    return sorted(
        z["ZoneName"]
        for z in response["AvailabilityZones"]
        if z.get("ZoneType", "availability-zone") == "availability-zone"
        and z.get("State", "available") == "available"
    )


def check_offerings(
    ec2: Any, region: str, pools: Sequence[NodePool], zones: Sequence[str] | None
) -> list[Check]:
    """Each pool's instance types must be offered in at least one of ``zones``."""
    types = sorted({t for pool in pools for t in pool.instance_types})
    try:
        used_zones = list(zones) if zones else region_zones(ec2)
        offered: dict[str, set[str]] = defaultdict(set)
        paginator = ec2.get_paginator("describe_instance_type_offerings")
        for page in paginator.paginate(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": types},
                {"Name": "location", "Values": used_zones},
            ],
        ):
            for offering in page["InstanceTypeOfferings"]:
                offered[offering["InstanceType"]].add(offering["Location"])
    except Exception as error:
        if not is_aws_error(error):
            raise
        return [
            Check(
                ACCOUNT_SCOPE,
                "instance offerings",
                "FAIL",
                f"cannot describe instance type offerings in {region}: "
                f"{describe_error(error, 'EC2')}",
            )
        ]
    checks = []
    for pool in pools:
        for instance_type in pool.instance_types:
            where = sorted(offered.get(instance_type, ()))
            if where:
                checks.append(
                    Check(
                        pool.name,
                        f"{instance_type} offered",
                        "PASS",
                        f"offered in {', '.join(where)}",
                    )
                )
            else:
                checks.append(
                    Check(
                        pool.name,
                        f"{instance_type} offered",
                        "FAIL",
                        f"{instance_type} is not offered in any of {', '.join(used_zones)} "
                        f"({region}); choose another instance type, region or zones",
                    )
                )
    return checks


def _get_quota_value(service_quotas: Any, quota: VcpuQuota) -> float | None:
    """The account's applied value, or AWS's default where none is applied.

    None when the answer holds no value: something other than Service Quotas answered
    (a proxy's page with status 200 parses as an empty answer).
    """
    try:
        response = service_quotas.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=quota.code)
    except Exception as error:
        if error_code(error) != "NoSuchResourceException":
            raise
        response = service_quotas.get_aws_default_service_quota(
            ServiceCode=SERVICE_CODE, QuotaCode=quota.code
        )
    value = response.get("Quota", {}).get("Value")
    return float(value) if isinstance(value, int | float) else None


def check_quotas(service_quotas: Any, pools: Sequence[NodePool]) -> list[Check]:
    """Each vCPU quota must cover the pools that count against it, all at ``max_size``.

    A pool with several instance types is counted at its largest. Instances running outside
    the cluster use the same quota; this check cannot see them, so leave headroom.
    """
    needed: dict[VcpuQuota, list[tuple[NodePool, int]]] = defaultdict(list)
    checks = []
    for pool in pools:
        try:
            quota = vcpu_quota(pool.instance, pool.capacity_type)
        except ValueError as error:
            checks.append(Check(pool.name, "vCPU quota", "FAIL", str(error)))
            continue
        vcpus = max(INSTANCE_TYPES[t].vcpus for t in pool.instance_types)
        needed[quota].append((pool, vcpus))
    for quota, users in needed.items():
        total = sum(pool.max_size * vcpus for pool, vcpus in users)
        breakdown = " + ".join(f"{pool.name}: {pool.max_size} x {vcpus}" for pool, vcpus in users)
        scope = ", ".join(pool.name for pool, _ in users)
        name = f"{quota.name} ({quota.code})"
        try:
            value = _get_quota_value(service_quotas, quota)
        except Exception as error:
            if not is_aws_error(error):
                raise
            checks.append(
                Check(
                    scope,
                    "vCPU quota",
                    "FAIL",
                    f"cannot read {name}: {describe_error(error, 'Service Quotas')}",
                )
            )
            continue
        if value is None:
            detail = f"cannot read {name}: Service Quotas answered without a quota value"
            checks.append(Check(scope, "vCPU quota", "FAIL", detail))
            continue
        if value >= total:
            checks.append(
                Check(
                    scope,
                    "vCPU quota",
                    "PASS",
                    f"{name}: {value:g} vCPUs >= {total} needed ({breakdown})",
                )
            )
        else:
            checks.append(
                Check(
                    scope,
                    "vCPU quota",
                    "FAIL",
                    f"{name} is {value:g} vCPUs but the node pools need {total} at max_size "
                    f"({breakdown}); request an increase of {quota.code} in Service Quotas",
                )
            )
    return checks


#: The row of adapters whose config does not fit their deployment: bad input, not a missing
#: upload (the command exits 2 with its one line).
ADAPTER_CONFIG_CHECK = "adapter configs"


def check_adapters(s3: Any, bucket: str, spec: ModelDeploymentSpec) -> list[Check]:
    """With ``adapters``: every adapter's folder holds an ``adapter_config.json`` (row
    ``adapters``), and each config fits the deployment (row :data:`ADAPTER_CONFIG_CHECK`;
    :mod:`eks_inference.ops.adapter_configs`)."""
    if spec.adapters is None:
        return []
    found = check_adapter_configs(s3, bucket, spec)
    prefix = f"s3://{bucket}/{spec.adapters.prefix}"
    present = Check(
        spec.name,
        "adapters",
        "FAIL" if found.missing else "PASS",
        "; ".join(found.missing) or f"{prefix}: {plural(len(found.checked), 'adapter')}",
    )
    read = len(found.checked) - len(found.missing)
    fitting = Check(
        spec.name,
        ADAPTER_CONFIG_CHECK,
        "FAIL" if found.refused else "PASS",
        "; ".join(found.refused) or f"{plural(read, 'config')} fit the deployment",
    )
    return [present, fitting]


def run_preflight(
    platform: PlatformSpec,
    clients: PreflightClients,
    *,
    deployments: Sequence[ModelDeploymentSpec] | None = None,
    zones: Sequence[str] | None = None,
) -> list[Check]:
    """Every check, in table order: account and bucket, deployments, offerings, quotas."""
    bucket = platform.model_bucket_name
    checks = [check_bucket(clients.s3, bucket)]
    bucket_ok = not checks[0].failed
    for spec in platform.deployments if deployments is None else deployments:
        if bucket_ok:
            checks.append(check_weights(clients.s3, bucket, spec))
            artifacts = check_artifacts(clients.s3, bucket, spec)
            if artifacts is not None:
                checks.append(artifacts)
            checks += check_adapters(clients.s3, bucket, spec)
            continue
        needs = f"not checked: bucket {bucket} is not available"
        checks.append(Check(spec.name, "weights", "FAIL", needs))
        if spec.on_neuron and not spec.neuron_options.allow_compile_at_startup:
            checks.append(Check(spec.name, "compiled artifacts", "FAIL", needs))
    checks += check_offerings(clients.ec2, platform.region, platform.node_pools, zones)
    checks += check_quotas(clients.service_quotas, platform.node_pools)
    return checks
