"""A small, approximate table of common EC2 instance types: their GPUs, and the offline price fallback.

The rates are Linux on-demand prices in us-east-1 in US dollars per hour, as
published on the AWS pricing pages around ``PRICES_AS_OF`` (after the June
2025 price cut for P4 and P5 instances). They are approximate: other regions
differ, prices change, spot is usually much cheaper and reserved capacity is
billed differently. rayrig's prices come from AWS (``pricing.py``); this table
serves only when those lookups fail, and the output then says so. The bill is
AWS's.

>>> hourly_usd("g5.12xlarge")
5.672
>>> gpu_count("p4d.24xlarge")
8
"""

from __future__ import annotations

from typing import NamedTuple

PRICES_AS_OF = "2025-06"
PRICE_REGION = "us-east-1"
PRICE_NOTE = (
    f"approximate {PRICE_REGION} Linux on-demand rates as of {PRICES_AS_OF}; "
    "spot is billed at the spot price, other regions differ"
)


class InstanceType(NamedTuple):
    """What rayrig knows about an instance type: its hourly price and GPUs."""

    hourly_usd: float
    gpus: int
    gpu_model: str | None = None


TABLE: dict[str, InstanceType] = {
    # --- P5 / P4 / P3: training ---------------------------------------------------
    "p5.48xlarge": InstanceType(55.04, 8, "H100"),
    "p4de.24xlarge": InstanceType(27.45, 8, "A100-80GB"),
    "p4d.24xlarge": InstanceType(21.96, 8, "A100"),
    "p3.2xlarge": InstanceType(3.06, 1, "V100"),
    "p3.8xlarge": InstanceType(12.24, 4, "V100"),
    "p3.16xlarge": InstanceType(24.48, 8, "V100"),
    "p3dn.24xlarge": InstanceType(31.212, 8, "V100-32GB"),
    # --- G6e (L40S) -------------------------------------------------------------
    "g6e.xlarge": InstanceType(1.861, 1, "L40S"),
    "g6e.2xlarge": InstanceType(2.242, 1, "L40S"),
    "g6e.4xlarge": InstanceType(3.004, 1, "L40S"),
    "g6e.8xlarge": InstanceType(4.529, 1, "L40S"),
    "g6e.12xlarge": InstanceType(10.493, 4, "L40S"),
    "g6e.16xlarge": InstanceType(7.577, 1, "L40S"),
    "g6e.24xlarge": InstanceType(15.066, 4, "L40S"),
    "g6e.48xlarge": InstanceType(30.131, 8, "L40S"),
    # --- G6 (L4) ----------------------------------------------------------------
    "g6.xlarge": InstanceType(0.805, 1, "L4"),
    "g6.2xlarge": InstanceType(0.978, 1, "L4"),
    "g6.4xlarge": InstanceType(1.323, 1, "L4"),
    "g6.8xlarge": InstanceType(2.014, 1, "L4"),
    "g6.12xlarge": InstanceType(4.602, 4, "L4"),
    "g6.16xlarge": InstanceType(3.397, 1, "L4"),
    "g6.24xlarge": InstanceType(6.675, 4, "L4"),
    "g6.48xlarge": InstanceType(13.350, 8, "L4"),
    # --- G5 (A10G) --------------------------------------------------------------
    "g5.xlarge": InstanceType(1.006, 1, "A10G"),
    "g5.2xlarge": InstanceType(1.212, 1, "A10G"),
    "g5.4xlarge": InstanceType(1.624, 1, "A10G"),
    "g5.8xlarge": InstanceType(2.448, 1, "A10G"),
    "g5.12xlarge": InstanceType(5.672, 4, "A10G"),
    "g5.16xlarge": InstanceType(4.096, 1, "A10G"),
    "g5.24xlarge": InstanceType(8.144, 4, "A10G"),
    "g5.48xlarge": InstanceType(16.288, 8, "A10G"),
    # --- G4dn (T4) --------------------------------------------------------------
    "g4dn.xlarge": InstanceType(0.526, 1, "T4"),
    "g4dn.2xlarge": InstanceType(0.752, 1, "T4"),
    "g4dn.4xlarge": InstanceType(1.204, 1, "T4"),
    "g4dn.8xlarge": InstanceType(2.176, 1, "T4"),
    "g4dn.12xlarge": InstanceType(3.912, 4, "T4"),
    "g4dn.16xlarge": InstanceType(4.352, 1, "T4"),
    "g4dn.metal": InstanceType(7.824, 8, "T4"),
    # --- CPU heads --------------------------------------------------------------
    "m5.large": InstanceType(0.096, 0),
    "m5.xlarge": InstanceType(0.192, 0),
    "m5.2xlarge": InstanceType(0.384, 0),
    "m5.4xlarge": InstanceType(0.768, 0),
    "m5.8xlarge": InstanceType(1.536, 0),
    "m6i.xlarge": InstanceType(0.192, 0),
    "m6i.2xlarge": InstanceType(0.384, 0),
    "m6i.4xlarge": InstanceType(0.768, 0),
    "c5.large": InstanceType(0.085, 0),
    "c5.xlarge": InstanceType(0.17, 0),
    "c5.2xlarge": InstanceType(0.34, 0),
    "c5.4xlarge": InstanceType(0.68, 0),
    "c5.9xlarge": InstanceType(1.53, 0),
}


def hourly_usd(instance_type: str) -> float | None:
    """The approximate on-demand $/h of ``instance_type``, or None when the table lacks it."""
    known = TABLE.get(instance_type)
    return known.hourly_usd if known else None


def gpu_count(instance_type: str) -> int | None:
    """The number of GPUs of ``instance_type``, or None when the table lacks it."""
    known = TABLE.get(instance_type)
    return known.gpus if known else None
