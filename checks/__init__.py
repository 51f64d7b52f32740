"""Post-deploy checks: inspect a deployed Ray cluster, benchmark its GPUs (or CPUs) and judge them.

A library beside rayrig's layers: it imports neither pyinfra nor the deploy code. Whoever
drives it hands it one :class:`checks.node.Node` per host.

On the operator's machine:

- :mod:`checks.node`: the node interface (run a command, copy a file);
- :mod:`checks.full`: the whole run across the nodes, and the commands the head runs, within
  the run's budget (:mod:`checks.run_budget`), each node's preflight at once (:mod:`checks.fanout`);
- :mod:`checks.quick`: the quick checks (alive nodes, their resources, one Ray version) in one command;
- :mod:`checks.preflight`: each node's GPUs and container, the cluster state against the inventory;
- :mod:`checks.gpu_health`: each GPU's health from the host's tools (nvidia-smi, NVLink, Xid errors,
  DCGM), parsed by :mod:`checks.nvidia_text`;
- :mod:`checks.shared_storage`: which node has which shared mount, and the round trip's reasons;
- :mod:`checks.verdict`: PASS / WARN / FAIL with reasons (:mod:`checks.reasons`), slow hosts named;
- :mod:`checks.report`: terminal tables, the JSON report, a bus-bandwidth plot, the saved reports.

In the head's ray-node container (``python -m``), from the copy of this package put there:

- :mod:`checks.cluster_state`: the alive Ray nodes, their resources and Ray version, the totals
  (the quick checks run it from its source, ``python -c``, copying nothing);
- :mod:`checks.storage_probe`: the shared-storage round trip through Ray tasks;
- :mod:`checks.monitoring`: what Prometheus says (targets up, GPU errors in a window), read over
  urllib in the monitoring host's container (the head's, unless ``monitoring_host`` names another);
- :mod:`checks.benchmark`: the benchmark's command line, on one machine (``--local``, torch
  only) or across the Ray cluster (``--cluster``: :mod:`checks.cluster_bench`, :mod:`checks.devices`,
  :mod:`checks.allreduce`, :mod:`checks.allreduce_plan`), with :mod:`checks.kernels` (torch measurements),
  :mod:`checks.deadlines` (the run's budget, deadlines judged against peers),
  :mod:`checks.throttle` (clock event reasons under load),
  :mod:`checks.maths` (nccl-tests formulas, outliers), :mod:`checks.specs` (datasheets) and
  :mod:`checks.progress` (progress lines, versions).

Importing this package imports neither torch nor Ray.
"""

REPORT_SCHEMA = "rayrig.checks.benchmark/1"  # the "schema" key of every benchmark report
