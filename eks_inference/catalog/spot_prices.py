"""EC2 spot prices the plan uses for pools that allow spot capacity, as data.

Spot prices move with supply and demand, by zone and by hour; these are a dated snapshot for
planning, not a quote, and ``eks-inference plan --spot-price TYPE=USD`` overrides any of them.
Each is the median over the us-east-1 zones that listed a price, Linux, USD per hour.

Source: ``catalogs/v9/aws/vms.csv`` of github.com/skypilot-org/skypilot-catalog at commit
2c3d7ea7d76bf84cf80d382e946c1609571485fd (the SkyPilot project's regular fetch of the EC2 spot
price history), read on 2026-12-03 (:data:`SPOT_PRICES_DATE`). The zones differ widely, which
is why the median is kept rather than the lowest: inf2.48xlarge listed 3.67 (use1-az6), 6.79,
11.15 and 12.98 (use1-az2, the on-demand price, so no spot discount there). Instance types
missing here had no spot price in that snapshot read (*unverified*): the plan prices them
on-demand and says so.
"""

from __future__ import annotations

SPOT_PRICES_DATE = "2026-12-03"
SPOT_PRICES_REGION = "us-east-1"
SPOT_PRICES_SOURCE = (
    "skypilot-org/skypilot-catalog catalogs/v9/aws/vms.csv @ 2c3d7ea7 "
    f"(median over {SPOT_PRICES_REGION} zones, read {SPOT_PRICES_DATE})"
)

SPOT_PRICES: dict[str, float] = {
    # zones: use1-az2, az4, az5, az6
    "inf2.xlarge": 0.1331,
    "inf2.8xlarge": 0.75205,
    "inf2.24xlarge": 2.6176,
    "inf2.48xlarge": 8.96665,
    # zones: use1-az1, az2, az4, az6
    "g6e.2xlarge": 0.98925,
    "g6e.24xlarge": 4.65135,
    "g6e.48xlarge": 11.3942,
}
"""Spot USD per hour by instance type (see the module docstring for source and date)."""

# Spot capacity for these accelerator families is scarce: EC2 may have none to give in a
# zone for hours, and reclaims what it gave with two minutes' notice.
SCARCE_SPOT_FAMILIES: frozenset[str] = frozenset({"inf2", "g6e"})
