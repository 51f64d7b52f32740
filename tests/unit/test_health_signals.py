"""The GPU signals the health gate judges every round (checks.monitoring's gpu_queries and gpu_reasons), on
the DCGM exporter's series of one host per case: tests/unit/fixtures/health/*.om (its generate.py says what
each holds), every query evaluated at the fixed time T inside them, over the gate's window by default (twice
health_interval_s).

Twice: in a real Prometheus (Debian's), the series backfilled with promtool; and gpu_reasons alone on
Prometheus's answers at T, recorded from it (``query_*.json``, written by the folder's generate.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from checks import monitoring
from checks.reasons import FAIL, WARN, Reason
from rayrig.dashboard import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "health"
T = 1796126400  # 2026-12-01T12:00:00Z, inside every case's series (generate.py)
WINDOW_S = 120  # the gate's window with health_interval_s = 60
TIMEOUT_S = 10
CASES = ("xid79", "xid48", "remap", "throttle", "hot", "nvlink", "blip", "pcie", "lone")
HOSTS = [{"name": name, "address": f"10.0.1.{i}", "jobs": ["node", "gpu"]} for i, name in enumerate(CASES, 1)]
H100 = "gpu 1 (NVIDIA H100 80GB HBM3)"

# What gpu_reasons finds on each case's host: level, device, words of its source, the start of its message.
EXPECTED: dict[str, list[tuple[str, str, str, str]]] = {
    "xid79": [
        (FAIL, "gpu 1", "DCGM_FI_DEV_XID_ERRORS", f"{H100}: Xid 79 in the last 2 min: GPU has fallen off the bus")
    ],
    "xid48": [
        (FAIL, "gpu 1", "DCGM_FI_DEV_XID_ERRORS", f"{H100}: Xid 48 in the last 2 min: double bit ECC error"),
        (FAIL, "gpu 1", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", f"{H100}: 1 uncorrectable (double-bit) ECC error(s) in the"),
    ],
    "remap": [(FAIL, "gpu 1", "DCGM_FI_DEV_ROW_REMAP_FAILURE", f"{H100}: row remapping failed")],
    "throttle": [(FAIL, "gpu 1", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", f"{H100}: HW slowdown (clocks cut by half")],
    "hot": [(FAIL, "gpu 1", "DCGM_FI_DEV_SLOWDOWN_TEMP", f"{H100}: at or above its slowdown temperature in")],
    "nvlink": [(FAIL, "gpu 1", "DCGM_EXP_GPU_HEALTH_STATUS", f"{H100}: NVLink down in")],
    # One scrape of HW slowdown, of heat, of an NVLink down: no FAIL. The clock event reasons' rule (the
    # checks' own, kept) says any HW slowdown under half the window as a WARN, which the gate does not count.
    "blip": [(WARN, "gpu 0", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpu 0 (NVIDIA H100 80GB HBM3): HW slowdown")],
    # A PCIe GPU without a bridge, its links reported down all along, and no GPU of its model passing.
    "pcie": [],
    # The only GPU of its model, its links up earlier in the window: an NVLink GPU, whose link went down.
    "lone": [(FAIL, "gpu 0", "DCGM_EXP_GPU_HEALTH_STATUS", "gpu 0 (NVIDIA A100-SXM4-80GB): NVLink down in")],
}


def assert_found(found: Sequence[Reason], case: str) -> None:
    expected = EXPECTED[case]
    assert [(r.level, r.device) for r in found if r.host == case] == [(level, dev) for level, dev, _s, _m in expected]
    for reason, (_level, _device, source, message) in zip([r for r in found if r.host == case], expected, strict=True):
        assert source in (reason.source or ""), reason
        assert reason.message.startswith(message), reason.message


def reasons_of(answers: Mapping[str, list[dict[str, Any]]]) -> list[Reason]:
    """gpu_reasons on the answers of every query gpu_queries makes when every metric is exported."""
    queries = monitoring.gpu_queries(monitoring.METRICS, WINDOW_S)
    metrics = {kind: metric for kind, (metric, _expr) in queries.items()}
    return monitoring.gpu_reasons({kind: answers[kind] for kind in queries}, metrics, HOSTS, WINDOW_S)


# --- a real Prometheus -------------------------------------------------------------------------------------


@contextmanager
def real_prometheus(folder: Path) -> Iterator[str]:
    """Prometheus on a free loopback port, over a TSDB of the fixtures' series (backfilled with promtool, one
    file after another: blocks that overlap in time are allowed); its URL."""
    data = folder / "data"
    for om in sorted(FIXTURES.glob("*.om")):
        done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, f"promtool could not backfill {om.name}: {done.stderr}"
    (folder / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")  # scrapes nothing
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=100y",
                                    f"--web.listen-address=127.0.0.1:{port}"],
                                   stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not get ready: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def answers_at(url: str, at: float) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The metrics exported at ``at`` and Prometheus's whole answer to each GPU query there, by kind."""
    exported = sorted(
        s["metric"]["__name__"] for s in monitoring.query(url, monitoring.exported_query(), TIMEOUT_S, at=at)
    )
    answers = {}
    for kind, (_metric, expr) in monitoring.gpu_queries(exported, WINDOW_S).items():
        series = monitoring.query(url, expr, TIMEOUT_S, at=at)
        answers[kind] = {"status": "success", "data": {"resultType": "vector", "result": series}}
    return exported, answers


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    missing = [tool for tool in ("promtool", "prometheus") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)} (Debian's prometheus package)")
    with real_prometheus(tmp_path_factory.mktemp("prometheus")) as url:
        yield url


@pytest.fixture(scope="module")
def found_in_prometheus(prometheus: str) -> list[Reason]:
    exported, answers = answers_at(prometheus, T)
    assert exported == sorted(set(monitoring.METRICS) - {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"})  # DCGM before 3.3
    return reasons_of({kind: answer["data"]["result"] for kind, answer in answers.items()})


@pytest.mark.parametrize("case", CASES)
def test_each_case_in_a_real_prometheus_gives_its_findings_naming_host_and_gpu(found_in_prometheus, case):
    assert_found(found_in_prometheus, case)


def test_the_findings_in_prometheus_are_those_of_its_recorded_answers(found_in_prometheus):
    def said(found: Sequence[Reason]) -> list[tuple[str, str | None, str, str]]:
        return sorted((r.level, r.host, r.device or "", r.source or "") for r in found)  # Prometheus's order is its own

    assert said(found_in_prometheus) == said(reasons_of(recorded_answers()))


def test_a_query_is_evaluated_at_the_time_asked(prometheus):
    assert monitoring.query(prometheus, monitoring.exported_query(), TIMEOUT_S) == []  # now: the series are past
    [xid] = monitoring.query(prometheus, 'DCGM_FI_DEV_XID_ERRORS{host="xid79", gpu="1"}', TIMEOUT_S, at=T)
    assert xid["value"] == [T, "79"]
    [before] = monitoring.query(prometheus, 'DCGM_FI_DEV_XID_ERRORS{host="xid79", gpu="1"}', TIMEOUT_S, at=T - 120)
    assert before["value"] == [T - 120, "0"]


def test_an_xid_that_held_all_the_window_is_from_before_it(prometheus):
    later = T + 30  # Xid 79 came at T - 60: 90 s before, inside a 2 min window, outside a 1 min one
    queries = monitoring.gpu_queries(monitoring.METRICS, 60)
    series = {
        kind: monitoring.query(prometheus, queries[kind][1], TIMEOUT_S, at=later) for kind in ("xid", "xid_before")
    }
    found = monitoring.gpu_reasons(series, {"xid": monitoring.XID, "xid_before": monitoring.XID}, HOSTS, 60)
    assert [(r.level, r.host, r.device) for r in found if r.host == "xid79"] == [("INFO", "xid79", "gpu 1")]


# --- the recorded answers ----------------------------------------------------------------------------------


def recorded_answers() -> dict[str, list[dict[str, Any]]]:
    kinds = monitoring.gpu_queries(monitoring.METRICS, WINDOW_S)
    return {kind: json.loads((FIXTURES / f"query_{kind}.json").read_text())["data"]["result"] for kind in kinds}


@pytest.mark.parametrize("case", CASES)
def test_each_case_in_the_recorded_answers_gives_its_findings_naming_host_and_gpu(case):
    assert_found(reasons_of(recorded_answers()), case)


def test_the_recorded_findings_say_how_much_of_the_window_and_what_to_look_at():
    found = {(r.host, r.device, r.source): r.message for r in reasons_of(recorded_answers())}
    hot = found["hot", "gpu 1", monitoring.SOURCE_HOT]
    assert hot == f"{H100}: at or above its slowdown temperature in 78% of the last 2 min"
    nvlink = found["nvlink", "gpu 1", monitoring.SOURCE_NVLINK]
    assert nvlink == f"{H100}: NVLink down in 78% of the last 2 min (dcgmi nvlink -s there says which)"
    throttle = [message for (host, _d, _s), message in found.items() if host == "throttle"]
    assert throttle == [f"{H100}: HW slowdown (clocks cut by half or more) in 78% of the last 2 min"]
    blip = [message for (host, _d, _s), message in found.items() if host == "blip"]
    assert blip == ["gpu 0 (NVIDIA H100 80GB HBM3): HW slowdown (clocks cut by half or more) in 11% of the last 2 min"]


def test_the_queries_read_the_gates_window_and_most_of_it():
    queries = {kind: expr for kind, (_metric, expr) in monitoring.gpu_queries(monitoring.METRICS, WINDOW_S).items()}
    assert list(queries) == ["xid", "xid_before", "throttle", "ecc", "remapped", "remap_failed", "hot", "nvlink_down"]
    assert all("[120s" in expr for expr in queries.values())
    assert queries["hot"].endswith("[120s:15s]) > 0.5") and " > 0.5 and on(modelName) " in queries["nvlink_down"]
    assert "[3600s:30s]" in monitoring.gpu_queries(monitoring.METRICS, 3600)["hot"][1]  # the checks' hour
    assert all(metric in monitoring.exported_query() for metric in monitoring.METRICS)


def test_without_the_slowdown_temperature_or_the_health_watches_neither_new_query_is_made():
    exported = [monitoring.XID, monitoring.GPU_TEMP]  # the DCGM exporter's default counters among them
    assert list(monitoring.gpu_queries(exported, WINDOW_S)) == ["xid", "xid_before"]
