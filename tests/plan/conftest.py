"""Plan tests keep rayrig's state (the cluster's Ray token) in a folder of their own."""

import os
import tempfile

os.environ.setdefault("RAYRIG_STATE_DIR", tempfile.mkdtemp(prefix="rayrig-plan-state-"))
