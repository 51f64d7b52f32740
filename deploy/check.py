"""Run the post-deploy checks alone, on a cluster that is already deployed.

    pyinfra inventories/prod.py deploy/check.py
    rayrig check inventories/prod.py        # the same; exit 0 on PASS or WARN, 1 on FAIL
    rayrig check inventories/prod.py --data checks_mode=quick   # the quick checks only

The full checks, benchmark included, unless ``checks_mode`` is ``"quick"``. The inventory is
validated first, like the deploy. Nothing is changed on any host.
"""

from pyinfra import host, inventory

from deploy.post_checks import post_deploy_checks
from deploy.run import pyinfra_costs
from deploy.run.interrupt import exit_130_on_interrupt
from deploy.run.timings import start_phase_clock
from deploy.run.validate import validate_once

exit_130_on_interrupt()  # pyinfra's CLI exits 0 on Ctrl-C: checks cut short must not read as PASS
pyinfra_costs.install()  # pyinfra's operation order, read off the frames: the same, faster
validate_once(host.state, inventory)
start_phase_clock(host.state)

post_deploy_checks(always=True)
