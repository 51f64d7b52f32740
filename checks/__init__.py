"""Post-deploy checks: benchmark the cluster's GPUs (or CPUs) and judge them.

- :mod:`checks.specs`: datasheet figures per GPU model, looked up by nvidia-smi name;
- :mod:`checks.kernels`: torch-only measurements (matmul TFLOPS, copy and
  host-to-device bandwidth), no Ray;
- :mod:`checks.maths`: nccl-tests bandwidth formulas and outlier detection;
- :mod:`checks.verdict`: PASS / WARN / FAIL with reasons, slow hosts named;
- :mod:`checks.report`: terminal tables, the JSON report, a bus-bandwidth plot;
- :mod:`checks.benchmark`: the command line, on one machine (``--local``, torch
  only) or across the Ray cluster (``--cluster``).

Importing this package imports neither torch nor Ray.
"""

REPORT_SCHEMA = "rayrig.checks.benchmark/1"  # the "schema" key of every benchmark report
