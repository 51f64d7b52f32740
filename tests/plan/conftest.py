"""Plan tests keep rayrig's state (the cluster's Ray token) in a folder of their own."""

import os
import secrets
import tempfile
from collections.abc import Iterator

import pytest

from tests.plan.harness import RECORD

os.environ.setdefault("RAYRIG_STATE_DIR", tempfile.mkdtemp(prefix="rayrig-plan-state-"))


@pytest.fixture(scope="session", autouse=True)
def same_tokens_while_recording() -> Iterator[None]:
    """A recorded plan run (harness.RECORD) is compared byte for byte with another one, so the
    random tokens it would make (the Ray token, temp names, the mirror's tag) are fixed there,
    for every fixture scope."""
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get(RECORD):
            patch.setattr(secrets, "token_hex", lambda nbytes=32: "5a" * nbytes)
        yield
