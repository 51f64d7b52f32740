"""One GPU's clock event reasons, sampled while a load runs (the benchmark's sustained matmul).

Stdlib only; NVML through pynvml when it is importable, else ``nvidia-smi``.

Example::

    with ThrottleSampler(nvml_id(0, uuid)) as sampler:
        run_the_load()
    entry["throttle_under_load"] = sampler.result()
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

from .nvidia_text import decode_reasons


def nvml_id(cuda_index: int, uuid: str | None) -> str:
    """The GPU as nvidia-smi ``-i`` and NVML know it: its UUID ("GPU-..."), else its index through
    ``CUDA_VISIBLE_DEVICES`` (CUDA numbers only the GPUs it sees, Ray sets it per task)."""
    if uuid:
        return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)


class ThrottleSampler:
    """One GPU's active clock event reasons, sampled in a background thread while a load runs.

    NVML through pynvml when importable (every ``interval_s``), else
    ``nvidia-smi --query-gpu=clocks_event_reasons.active`` (``clocks_throttle_reasons.active``
    before driver 535) at most once a second. A failing read ends the sampling, never the load.

    Example::

        with ThrottleSampler(nvml_id(0, uuid)) as sampler:
            run_the_load()
        entry["throttle_under_load"] = sampler.result()
    """

    def __init__(self, gpu: str, interval_s: float = 0.2):
        self.gpu = gpu
        self.interval_s = interval_s
        self.samples = 0
        self.counts: dict[str, int] = {}
        self.via: str | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle-sampler", daemon=True)

    def __enter__(self) -> ThrottleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def record(self, mask: int) -> None:
        """Count one sample's reasons."""
        self.samples += 1
        for name in decode_reasons(mask):
            self.counts[name] = self.counts.get(name, 0) + 1

    def result(self) -> dict[str, Any]:
        """``{"reasons": [...], "samples": n, "counts": {reason: samples}, "via": "nvml" | "nvidia-smi"}``
        (and ``"error"`` when reading failed)."""
        found: dict[str, Any] = {"reasons": sorted(self.counts), "samples": self.samples, "counts": dict(self.counts),
                                 "via": self.via}  # fmt: skip
        if self.error:
            found["error"] = self.error
        return found

    def _run(self) -> None:
        nvml = None
        try:
            nvml = self._nvml()
            reader, self.via, interval = nvml or (self._smi, "nvidia-smi", max(self.interval_s, 1.0))
            while True:  # one sample at least, however short the load
                self.record(reader())
                if self._stop.wait(interval):
                    break
        except Exception as exc:  # noqa: BLE001 - sampling is a bonus: the measurement goes on without it
            self.error = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            if nvml is not None:
                self._nvml_shutdown()

    _nvml_shutdown: Any = staticmethod(lambda: None)

    def _nvml(self) -> tuple[Any, str, float] | None:
        try:  # optional: the container may have no pynvml, then nvidia-smi answers
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            if self.gpu.startswith(("GPU-", "MIG-")):
                handle = pynvml.nvmlDeviceGetHandleByUUID(self.gpu)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(self.gpu))
        except Exception:  # noqa: BLE001 - pynvml missing or NVML unusable
            return None
        read = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self._nvml_shutdown = pynvml.nvmlShutdown
        return (lambda: int(read(handle))), "nvml", self.interval_s

    _smi_field: str | None = None

    def _smi(self) -> int:
        fields = (
            [self._smi_field] if self._smi_field else ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]
        )
        for field in fields:
            done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader", "-i", self.gpu],
                                  capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
            value = done.stdout.strip().splitlines()[0].strip() if done.stdout.strip() else ""
            if done.returncode == 0 and value.lower().startswith("0x"):
                self._smi_field = field
                return int(value, 16)
        raise RuntimeError(f"nvidia-smi gave no clock event reasons for {self.gpu}")
