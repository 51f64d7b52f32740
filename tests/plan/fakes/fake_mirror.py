"""The head's image mirror as plan tests meet it: what its copy prints, so that the hosts' pinned pulls
(``deploy.host.image_mirror.PinnedPull``, made when they run) find a digest to pull."""

from __future__ import annotations

from tests.plan.fakes.fakestep import FakeState

#: The digest every fake copy into the mirror prints.
DIGEST = "sha256:" + "d1" * 32


def facts() -> FakeState:
    """The answers of the head's copy (``mirror-copy.sh``) and of its wait for the Ray image's copy."""
    state = FakeState()
    # Substrings of the commands (plain strings: an inventory's data must stay JSON, as pyinfra prints it)
    state.responses["wait-image /var/lib/rayrig/image-pull copied "] = [f"copied 0 1.0 {DIGEST}"]
    state.responses["/usr/local/lib/rayrig/mirror-copy.sh "] = [f"digest {DIGEST}"]
    return state
