"""What a cluster costs, against moto and the recorded Pricing API: prices from AWS (the offline table only when a
lookup fails, and said so), the estimate of ``up``, the cost so far of ``ls``, and ``down`` that says it and asks."""

from __future__ import annotations

import datetime as dt
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2 import teardown
from cloud.ec2.aws import forget_connections, utc_now
from cloud.ec2.spec import load_spec
from rayrig.commands import cloud as cloud_commands
from tests.cloud.conftest import Calls, Injector, base_spec, raw_client, run_cli
from tests.cloud.pricing_api import PricingApi

pytestmark = pytest.mark.cloud

#: The filters every on-demand lookup sends besides the instance type and the region.
LINUX_SHARED = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


def filters_of(params: dict[str, Any]) -> dict[str, str]:
    assert all(f["Type"] == "TERM_MATCH" for f in params["Filters"])
    return {f["Field"]: f["Value"] for f in params["Filters"]}


def set_price(api: PricingApi, instance_type: str, region: str, usd: str) -> None:
    """Change the recorded on-demand price of ``instance_type`` in ``region``."""
    (product,) = [
        p
        for p in api.products
        if p["product"]["attributes"]["instanceType"] == instance_type
        and p["product"]["attributes"]["regionCode"] == region
    ]
    for term in product["terms"]["OnDemand"].values():
        for dimension in term["priceDimensions"].values():
            dimension["pricePerUnit"]["USD"] = usd


def live_instances(aws: str, name: str = "sprint42", region: str = "us-east-1") -> list[str]:
    client = raw_client("ec2", aws)
    client.meta.config.region_name = region
    reservations = client.describe_instances(Filters=[{"Name": "tag:rayrig:cluster", "Values": [name]}])
    return [i["InstanceId"] for r in reservations["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] != "terminated"]  # fmt: skip


def bring(path: Path, no_ssh: Any) -> None:
    ec2.up(load_spec(path), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)


@pytest.fixture
def cluster(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """sprint42 in us-east-1a: an on-demand m5.2xlarge head and two spot g5.12xlarge workers."""
    bring(write_spec(base_spec(keys[0], network={"availability_zone": "us-east-1a"})), no_ssh)
    calls.clear()
    capsys.readouterr()


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> dt.datetime:
    """Three hours after now, as ``ls`` and ``down`` see the clock."""
    then = utc_now() + dt.timedelta(hours=3)
    monkeypatch.setattr(cloud_commands, "utc_now", lambda: then)
    monkeypatch.setattr(teardown, "utc_now", lambda: then)
    return then


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``terminal("y\\n")``: stdin is a terminal on which the user types that."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    return lambda typed: monkeypatch.setattr("sys.stdin", Terminal(typed))


# --------------------------------------------------------------------------- up: where the estimate comes from


def test_up_prices_on_demand_from_the_pricing_api_and_spot_from_the_spot_history(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    calls: Calls,
    pricing_api: PricingApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    set_price(pricing_api, "m5.2xlarge", "us-east-1", "0.5000000000")  # not the offline table's 0.384
    spec = base_spec(keys[0], network={"availability_zone": "us-east-1b"})
    spec["workers"].append({"name": "cpu", "instance_type": "m5.2xlarge", "count": 2})

    ec2.up(load_spec(write_spec(spec)), assume_yes=True, ssh_probe=no_ssh, say=print)

    out = capsys.readouterr().out
    assert "head: 1 x m5.2xlarge on-demand, 50 GB encrypted gp3, IMDSv2 only ($0.50/h, AWS Pricing)" in out
    assert "cpu: 2 x m5.2xlarge on-demand, 100 GB encrypted gp3, IMDSv2 only ($1.00/h, AWS Pricing)" in out
    assert "gpu: 2 x g5.12xlarge spot, 200 GB encrypted gp3, IMDSv2 only ($0.00/h, spot price history)" in out
    assert "Estimated cost: $1.50/h, about $252 if it runs for the whole ttl" in out
    assert "(instances only; prices: AWS Pricing, spot price history)" in out
    assert "prices:" not in out.replace("; prices:", "") and "offline table" not in out
    # One lookup per type: the Pricing API for on-demand (Linux, shared, in the spec's region), the spot history
    # for spot (Linux, in the spec's zone); no on-demand lookup for a type priced at its spot price.
    (lookup,) = calls.params("GetProducts")
    assert lookup["ServiceCode"] == "AmazonEC2"
    assert filters_of(lookup) == {"instanceType": "m5.2xlarge", "regionCode": "us-east-1", **LINUX_SHARED}
    (history,) = calls.params("DescribeSpotPriceHistory")
    assert history["InstanceTypes"] == ["g5.12xlarge"] and history["ProductDescriptions"] == ["Linux/UNIX"]
    assert history["Filters"] == [{"Name": "availability-zone", "Values": ["us-east-1b"]}]
    assert [r["ServiceCode"] for r in pricing_api.requests] == ["AmazonEC2"]  # it reached the Pricing API


def test_up_falls_back_to_the_offline_table_and_says_which_lookup_failed_and_why(
    write_spec: Callable[..., Path], no_ssh: Any, calls: Calls, inject: Injector, capsys: pytest.CaptureFixture[str]
) -> None:
    inject.fail("GetProducts", "AccessDeniedException", "User is not authorized to perform: pricing:GetProducts")
    inject.fail(
        "DescribeSpotPriceHistory", "UnauthorizedOperation", "You are not authorized to perform this operation."
    )

    ec2.up(load_spec(write_spec()), assume_yes=True, ssh_probe=no_ssh, say=print)

    out = capsys.readouterr().out.splitlines()
    notices = [line for line in out if line.startswith("prices: ")]
    assert notices == [
        "prices: asking the AWS Pricing API for the on-demand price of m5.2xlarge in us-east-1: not permitted "
        "(AccessDeniedException); the IAM policy of these credentials must allow it; on-demand rates below are from "
        "the offline table (approximate us-east-1 Linux on-demand rates as of 2025-06; spot is billed at the spot "
        "price, other regions differ)",
        "prices: reading the spot price history of g5.12xlarge in us-east-1: not permitted (UnauthorizedOperation); "
        "the IAM policy of these credentials must allow it; spot instances are priced at their on-demand rate, "
        "an upper bound",
    ]
    assert any("head: 1 x m5.2xlarge on-demand" in line and "($0.38/h, offline table)" in line for line in out)
    assert any(
        "gpu: 2 x g5.12xlarge spot" in line and "($11.34/h, offline table, on-demand rate as an upper bound)" in line
        for line in out
    )
    assert any(line.startswith("Estimated cost: $11.73/h") for line in out)
    # Each API was asked once: after a failure the run asks it nothing more (g5.12xlarge's on-demand rate too).
    assert calls.names().count("GetProducts") == 1 and calls.names().count("DescribeSpotPriceHistory") == 1


def test_an_unreachable_pricing_endpoint_falls_back_within_seconds(
    write_spec: Callable[..., Path], no_ssh: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAYRIG_AWS_PRICING_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nobody listens
    forget_connections()
    started = time.monotonic()

    ec2.up(load_spec(write_spec()), assume_yes=True, ssh_probe=no_ssh, say=print)

    assert time.monotonic() - started < 30
    out = capsys.readouterr().out
    (notice,) = [line for line in out.splitlines() if line.startswith("prices: ")]
    assert notice.startswith("prices: asking the AWS Pricing API for the on-demand price of m5.2xlarge in us-east-1: "
                             "cannot reach http://127.0.0.1:9")  # fmt: skip
    assert notice.endswith("on-demand rates below are from the offline table (approximate us-east-1 Linux on-demand "
                           "rates as of 2025-06; spot is billed at the spot price, other regions differ)")  # fmt: skip
    assert "($0.38/h, offline table)" in out and "spot price history" in out  # spot still from EC2


def test_a_type_the_pricing_api_does_not_list_is_priced_from_the_table_and_said_so(
    write_spec: Callable[..., Path], no_ssh: Any, pricing_api: PricingApi, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing_api.products = [
        p for p in pricing_api.products if p["product"]["attributes"]["instanceType"] != "m5.2xlarge"
    ]

    ec2.up(load_spec(write_spec()), assume_yes=True, ssh_probe=no_ssh, say=print)

    out = capsys.readouterr().out
    assert (
        "prices: the AWS Pricing API lists no Linux on-demand price of m5.2xlarge in us-east-1; its rate is from the "
        "offline table" in out
    )
    assert "($0.38/h, offline table)" in out


def test_a_zone_without_a_spot_price_prices_spot_at_the_on_demand_rate_and_says_so(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # moto offers no g5.12xlarge in us-east-1e, so its spot price history has none there.
    ec2.up(load_spec(write_spec(base_spec(keys[0], network={"availability_zone": "us-east-1e"}))),
           assume_yes=True, ssh_probe=no_ssh, say=print)  # fmt: skip

    out = capsys.readouterr().out
    assert "gpu: 2 x g5.12xlarge spot" in out and "($11.34/h, AWS Pricing, on-demand rate as an upper bound)" in out
    assert "prices: no spot price of g5.12xlarge in us-east-1e; priced at its on-demand rate, an upper bound" in out


# --------------------------------------------------------------------------- ls: cost so far


def test_ls_shows_launch_run_time_rate_and_cost_so_far(
    cluster: None, later: dt.datetime, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "ls") == 0

    out = capsys.readouterr().out.splitlines()
    header = out[0].split()
    row = dict(zip(["NAME", "OWNER", "LAUNCHED", "LAUNCHED_TIME", "UP"], next(
        line for line in out if line.startswith("sprint42")).split()[:5], strict=True))  # fmt: skip
    assert header[-2:] == ["$/H", "COST"]
    launched = dt.datetime.strptime(f"{row['LAUNCHED']} {row['LAUNCHED_TIME']}", "%Y-%m-%d %H:%M")
    assert abs(later - dt.timedelta(hours=3) - launched.replace(tzinfo=dt.timezone.utc)) < dt.timedelta(minutes=2)
    assert row["UP"] in ("2h59m", "3h00m")
    line = next(line for line in out if line.startswith("sprint42"))
    # 3 h of the head at $0.384/h (the Pricing API) and of two spot workers at moto's $0.00001/h.
    assert line.split()[-2:] == ["0.38", "$1.15"]
    assert out[-1] == (
        "$/H and COST in USD, instances only; COST: each instance's hours since its launch x its rate "
        "(prices: AWS Pricing, spot price history)"
    )
    # Each instance priced in its own market and zone: the spot workers by their zone's history.
    (history,) = calls.params("DescribeSpotPriceHistory")
    assert history["InstanceTypes"] == ["g5.12xlarge"]
    assert history["Filters"] == [{"Name": "availability-zone", "Values": ["us-east-1a"]}]
    assert [filters_of(p)["instanceType"] for p in calls.params("GetProducts")] == ["m5.2xlarge"]


def test_ls_says_when_its_rates_come_from_the_offline_table(
    cluster: None, later: dt.datetime, inject: Injector, capsys: pytest.CaptureFixture[str]
) -> None:
    inject.fail("GetProducts", "ThrottlingException", "Rate exceeded", times=None)

    assert run_cli("cloud", "ls") == 0

    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("prices: asking the AWS Pricing API for the on-demand price of m5.2xlarge in us-east-1: "
                              "AWS kept throttling the requests (ThrottlingException, 2 attempts)")  # fmt: skip
    assert "offline table" in out[-2]  # the footer names the source


# --------------------------------------------------------------------------- down: says the cost, then asks


def test_down_without_a_terminal_and_without_yes_says_the_cost_and_refuses(
    cluster: None, later: dt.datetime, aws: str, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "down", "sprint42") == 1

    captured = capsys.readouterr()
    assert captured.err == (
        "rayrig cloud down: not confirmed: stdin is not a terminal; pass --yes to take cluster sprint42 down "
        "without asking\n"
    )
    out = captured.out.splitlines()
    assert out[0].startswith("Cluster sprint42 in us-east-1: launched ")
    assert out[0].endswith(
        (", up 2h59m; 3 instance(s) running at $0.38/h", ", up 3h00m; 3 instance(s) running at $0.38/h")
    )
    assert out[1] == (
        "Estimated cost so far: $1.15 (instances only, each since its launch; prices: AWS Pricing, spot price history)"
    )
    assert calls.mutating() == [] and len(live_instances(aws)) == 3


def test_down_asks_on_a_terminal_and_no_keeps_the_cluster(
    cluster: None, aws: str, terminal: Callable[[str], None], calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal("n\n")
    assert run_cli("cloud", "down", "sprint42") == 1
    captured = capsys.readouterr()
    assert "Estimated cost so far: $0.00" in captured.out
    assert "Take down cluster sprint42 (" in captured.out and "resource(s))? [y/N]" in captured.out
    assert captured.err == "rayrig cloud down: not confirmed; nothing of cluster sprint42 was deleted\n"
    assert calls.mutating() == [] and len(live_instances(aws)) == 3


def test_down_asks_on_a_terminal_and_yes_takes_it_down(
    cluster: None, aws: str, terminal: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    terminal("y\n")
    assert run_cli("cloud", "down", "sprint42") == 0
    out = capsys.readouterr().out
    assert out.index("Estimated cost so far:") < out.index("? [y/N]") < out.index("Taking down cluster sprint42")
    assert live_instances(aws) == []


def test_down_with_yes_does_not_ask(
    cluster: None, aws: str, terminal: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    terminal("")  # a terminal where nobody answers: asking would read EOF and keep the cluster
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    out = capsys.readouterr().out
    assert "Estimated cost so far: $0.00" in out and "[y/N]" not in out
    assert live_instances(aws) == []


def test_down_of_a_cluster_whose_instances_are_gone_says_so_and_still_asks(
    cluster: None, aws: str, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    client = raw_client("ec2", aws)
    client.terminate_instances(InstanceIds=live_instances(aws))
    calls.clear()

    assert run_cli("cloud", "down", "sprint42") == 1  # the network is left, and nobody to ask

    out = capsys.readouterr().out
    assert "Cluster sprint42 in us-east-1: none of its instances is running; they cost nothing now." in out
    assert calls.mutating() == [] and "GetProducts" not in calls.names()


def test_reap_says_the_cost_and_does_not_ask_per_cluster(
    cluster: None, aws: str, terminal: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    terminal("y\n")  # one answer: reap's own question, none from down
    assert ec2.reap(now=utc_now() + dt.timedelta(days=8), confirm=cloud_commands.ask, say=print) == 0
    out = capsys.readouterr().out
    assert out.count("[y/N]") == 1 and "Take down 1 expired cluster(s)? [y/N]" in out
    assert "Estimated cost so far:" in out and live_instances(aws) == []


# --------------------------------------------------------------------------- the region from the cluster's record


def test_ls_and_down_price_a_cluster_in_the_region_its_record_names(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    aws: str,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bring(write_spec(base_spec(keys[0], region="eu-west-1")), no_ssh)  # boto3's default region is us-east-1
    calls.clear()
    capsys.readouterr()

    assert run_cli("cloud", "ls") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "==> eu-west-1" and out[2].startswith("sprint42") and " 0.43 " in out[2]  # eu-west-1's $0.428
    assert {filters_of(p)["regionCode"] for p in calls.params("GetProducts")} == {"eu-west-1"}

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    out = capsys.readouterr().out
    assert "Cluster sprint42 in eu-west-1: launched " in out and "running at $0.43/h" in out
    assert "Nothing is left with the tag rayrig:cluster=sprint42 in eu-west-1." in out
    assert live_instances(aws, region="eu-west-1") == []
