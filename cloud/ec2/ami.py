"""The AMI a cluster runs and the instance types it runs on: resolved and checked before anything is created."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cloud.ec2 import instance_types
from cloud.ec2.aws import Aws, CloudError, aws_step
from cloud.ec2.spec import ClusterSpec

#: (substring of an AMI's name or description, lower case) -> its default SSH user. First match wins.
AMI_FAMILIES: tuple[tuple[str, str], ...] = (
    ("ubuntu", "ubuntu"),
    ("debian", "admin"),
    ("al2023", "ec2-user"),
    ("amazon linux", "ec2-user"),
    ("amzn", "ec2-user"),
    ("rocky", "rocky"),
    ("almalinux", "ec2-user"),
    ("rhel", "ec2-user"),
    ("red hat", "ec2-user"),
    ("centos", "centos"),
    ("fedora", "fedora"),
    ("suse", "ec2-user"),
)


def ssh_user_for_ami(ami: Mapping[str, Any]) -> str | None:
    """The default SSH user of a described AMI, from its family (name/description), or None.

    >>> ssh_user_for_ami({"Name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250101"})
    'ubuntu'
    """
    text = f"{ami.get('Name', '')} {ami.get('Description', '')}".lower()
    for needle, user in AMI_FAMILIES:
        if needle in text:
            return user
    return None


@dataclass(frozen=True)
class Ami:
    """The AMI a cluster runs: id, name, root device and size, architecture, SSH user."""

    id: str
    name: str
    root_device: str
    root_size_gb: int
    architecture: str
    ssh_user: str


def resolve_ami(aws: Aws, spec: ClusterSpec) -> Ami:
    """Resolve the spec's AMI (through SSM if asked) and check that it can run the cluster."""
    ami_id = spec.ami.id
    if spec.ami.ssm_parameter:
        try:
            with aws_step(f"reading SSM parameter {spec.ami.ssm_parameter}", spec.region):
                ami_id = aws.ssm.get_parameter(Name=spec.ami.ssm_parameter)["Parameter"]["Value"]
        except CloudError as exc:
            raise CloudError(f"{spec.path}: ami.ssm_parameter: {exc}") from None
    try:
        with aws_step(f"reading AMI {ami_id}", spec.region):
            described = aws.ec2.describe_images(ImageIds=[ami_id])["Images"]
    except CloudError as exc:
        raise CloudError(f"{spec.path}: ami: {exc}") from None
    if not described:
        raise CloudError(f"{spec.path}: ami: AMI {ami_id} does not exist in {spec.region}")
    found = described[0]
    if found.get("Platform") == "windows":
        raise CloudError(f"{spec.path}: ami: {ami_id} ({found.get('Name')}) is a Windows AMI; rayrig needs Linux")
    user = spec.ami.ssh_user or ssh_user_for_ami(found)
    if not user:
        raise CloudError(
            f"{spec.path}: ami.ssh_user: cannot tell the SSH user of {ami_id} ({found.get('Name')!r}); "
            'set ami.ssh_user, e.g. "ubuntu" or "ec2-user"'
        )
    root_device = found.get("RootDeviceName") or "/dev/xvda"
    root_size = 8
    for mapping in found.get("BlockDeviceMappings", []):
        if mapping.get("DeviceName") == root_device and "Ebs" in mapping:
            root_size = int(mapping["Ebs"].get("VolumeSize") or root_size)
    return Ami(ami_id, found.get("Name", ""), root_device, root_size, found.get("Architecture", "x86_64"), user)


def instance_type_info(aws: Aws, types: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Described instance types by name; a type the region does not offer raises ``CloudError``."""
    types = sorted(set(types))
    try:
        with aws_step("reading instance types", aws.region):
            found = aws.ec2.describe_instance_types(InstanceTypes=types)["InstanceTypes"]
    except CloudError as exc:
        raise CloudError(f"{exc} (instance types {', '.join(types)})") from None
    info = {t["InstanceType"]: t for t in found}
    missing = [t for t in types if t not in info]
    if missing:
        raise CloudError(f"instance type(s) {', '.join(missing)} not offered in {aws.region}")
    return info


def check_fit(spec: ClusterSpec, ami: Ami, types: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise ``CloudError`` unless every group's instance types run the AMI and its root volume holds it."""
    problems = []
    for where, group in [("head", spec.head)] + [(f"workers[{i}]", g) for i, g in enumerate(spec.workers)]:
        for i, instance_type in enumerate(group.preferences):
            archs = types[instance_type].get("ProcessorInfo", {}).get("SupportedArchitectures", [])
            key = f"instance_types[{i}]" if group.instance_types else "instance_type"
            if archs and ami.architecture not in archs:
                problems.append(
                    f"{where}.{key} = {instance_type!r}: expected a type that runs "
                    f"{ami.architecture} AMIs like {ami.id} (it runs {', '.join(archs)})"
                )
        if group.root_volume_gb < ami.root_size_gb:
            problems.append(
                f"{where}.root_volume_gb = {group.root_volume_gb}: expected at least {ami.root_size_gb}, "
                f"the size of the AMI's root snapshot"
            )
    if problems:
        raise CloudError(f"{spec.path}: " + "; ".join(problems))


def gpus_of(instance_type: str, info: Mapping[str, Any] | None = None) -> int | None:
    """GPUs of an instance type: from the price table, else from a described type, else None."""
    known = instance_types.gpu_count(instance_type)
    if known is not None:
        return known
    if info is not None:
        return sum(int(g.get("Count", 0)) for g in info.get("GpuInfo", {}).get("Gpus", []))
    return None
