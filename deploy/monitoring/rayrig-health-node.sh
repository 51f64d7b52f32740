#!/bin/sh
# rayrig: what the health gate may run on this host (health_gate; deploy/monitoring/health.py).
# The gate's SSH key may run this command only (authorized_keys: restrict,command=...): the
# words it sent come in $SSH_ORIGINAL_COMMAND and are handed to the program as one argument,
# which parses them as a verb and its options (checks/health_node.py); no shell sees them.
if [ -n "${SSH_ORIGINAL_COMMAND+set}" ]; then
  set -- --ssh-command "$SSH_ORIGINAL_COMMAND"
fi
if [ "$(id -u)" != 0 ]; then
  exec sudo -n {{ path }} "$@"
fi
cd {{ code_dir }} || exit 1
exec /usr/bin/env python3 -m checks.health_node "$@"
