"""Which keys of the names-and-keys rows their checks actually observe: drop one override, rerun, see the check fail.

tests/trainer/test_names_and_keys_on_cpu.py runs each row of ``ROWS`` once and calls its ``CHECKS`` entry.
A key counts as observed only if that check fails when the key's override is left out (the run then takes
the yaml default). Keys listed in the test's ``NO_CPU_EFFECT`` (with the reason) are skipped. A key the
check does not notice is printed as UNOBSERVED: add a check of its effect or list it with its reason.

This costs one 2-step run per key (about 25 s each on 2 cores), so it runs by hand or nightly, never in
the suite; the suite's static coverage test (tests/test_everything_advertised_runs.py) stays as fast as it is.

    PYTHONPATH=$PWD RAY_AUTH_MODE=disabled python scripts/audit_key_effects.py --row gpg --row gae_lora_critic
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import ray

from tests.conftest import start_local_ray
from tests.trainer.helpers import train
from tests.trainer.test_names_and_keys_on_cpu import ARR, CHECKS, NO_CPU_EFFECT, ROWS


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _passes(row: str, overrides: list[str]) -> bool:
    """Whether the row's check passes on a 2-step run with ``overrides``."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        concrete = [o.replace("RUN_DIR", str(run_dir)) for o in overrides]
        history = train(run_dir, "trainer.total_training_steps=2", *concrete)
        steps = [h for h in history if h["step"] > 0]
        try:
            CHECKS[row](steps, run_dir)
        except AssertionError:
            return False
    return True


def audit(row: str) -> list[str]:
    """The keys of ``row`` whose override its check does not notice when left out."""
    assert _passes(row, ROWS[row]), f"row {row} fails its check as written"
    unobserved = []
    for override in ROWS[row]:
        key = _key(override)
        if key.removeprefix(f"{ARR}.") in NO_CPU_EFFECT or "RUN_DIR" in override:
            continue  # listed with its reason, or a path the check reads from
        rest = [o for o in ROWS[row] if o != override]
        try:
            noticed = not _passes(row, rest)
        except Exception as exc:  # noqa: BLE001  the run itself needed the key: that is an effect too
            noticed = True
            print(f"  {key}: the run fails without it ({type(exc).__name__})")
        print(f"{row}: {key}: {'observed' if noticed else 'UNOBSERVED'}", flush=True)
        if not noticed:
            unobserved.append(key)
    return unobserved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", action="append", choices=sorted(ROWS), help="rows to audit (default: all)")
    args = parser.parse_args(argv)
    start_local_ray()
    try:
        unobserved = {row: audit(row) for row in args.row or sorted(ROWS)}
    finally:
        ray.shutdown()
    missing = {row: keys for row, keys in unobserved.items() if keys}
    for row, keys in missing.items():
        print(f"UNOBSERVED in {row}: {', '.join(keys)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
