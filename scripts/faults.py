"""The fault campaign on a lab of its own: deploys cut on purpose, and whether the next run converges.

    python scripts/faults.py                       # 6 rounds: each kind of fault once
    python scripts/faults.py --rounds 30           # the long form
    python scripts/faults.py --seed 1234           # replay a campaign (the seed is printed first)
    python scripts/faults.py --kinds kill,reboot --scenarios image,tls

Each round cuts a deploy (a first deploy of fresh hosts, an image roll, TLS turned on, or a fourth
host joining with a plain deploy) at an
operation drawn from those pyinfra reports, by one fault: the deploy killed (SIGKILL) or interrupted
(SIGINT), one host's network cut for 10 to 45 s, its Docker engine restarted, the host rebooted, or
rayrig's folder on it full. The next plain deploy must converge (tests/e2e/faultkit.py says what that
means). The end is a table: fault, cut point, converged, seconds to converge. Exit status 1 when a
round did not converge. The lab (``rayrig-faults`` unless ``RAYRIG_E2E_LAB`` says otherwise) is
taken down at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAYRIG_E2E_LAB", "rayrig-faults")
os.environ.pop("PYTEST_XDIST_WORKER", None)

from cloud import lab as local  # noqa: E402
from tests.e2e import faultkit  # noqa: E402
from tests.e2e.labkit import LAB, Lab, fresh_lab  # noqa: E402


def names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    picked = tuple(x.strip() for x in text.split(",") if x.strip())
    wrong = [x for x in picked if x not in allowed]
    if wrong or not picked:
        raise argparse.ArgumentTypeError(
            f"{what}: {', '.join(wrong) or 'none given'}; choose from {', '.join(allowed)}"
        )
    return picked


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=len(faultkit.KINDS), help="how many rounds (default: 6)")
    parser.add_argument("--seed", type=int, default=None, help="replay the campaign of this seed")
    parser.add_argument("--kinds", type=lambda t: names(t, faultkit.KINDS, "--kinds"), default=faultkit.KINDS)
    parser.add_argument("--scenarios", type=lambda t: names(t, faultkit.SCENARIOS, "--scenarios"),
                        default=faultkit.SCENARIOS)  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    picked = "".join(f" --{name} {','.join(value)}" for name, value, default in
                     (("kinds", args.kinds, faultkit.KINDS), ("scenarios", args.scenarios, faultkit.SCENARIOS))
                     if value != default)  # fmt: skip
    print(f"fault campaign on lab {LAB}: seed {seed} (replay: python scripts/faults.py --seed {seed} "
          f"--rounds {args.rounds}{picked})", flush=True)  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rayrig-faults-") as folder:
        campaign = faultkit.Campaign(Lab(fresh_lab(LAB)), Path(folder), seed, log=lambda s: print(s, flush=True))
        try:
            for r in campaign.plan(args.rounds, args.kinds, args.scenarios):
                try:
                    campaign.run_round(r)
                except Exception as exc:  # the round could not be run to its end: a finding, not a crash
                    r.problems.append(f"the round stopped: {type(exc).__name__}: {str(exc)[-400:]}")
                    campaign.rows.append(r)
                    print(faultkit.row(r), flush=True)
        finally:
            if not args.keep:
                local.down(LAB)
    print(f"\nseed {seed}, {len(campaign.rows)} rounds in {time.monotonic() - started:.0f} s\n")
    print(faultkit.table(campaign.rows))
    failed = [r for r in campaign.rows if not r.converged]
    print(f"\n{len(campaign.rows) - len(failed)} of {len(campaign.rows)} rounds converged")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
