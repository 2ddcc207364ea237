"""Where a command's CPU time goes, by kind of process: the test suite by default.

The suite is CPU-bound on the 2-core machine (both cores ~97-99% busy from start to end), so its wall
time follows the CPU-seconds its processes spend. This runs a command and polls ``/proc`` meanwhile,
attributing every process's CPU time (user + system, from when it was first seen) to a kind: a Ray
worker by the actor class in its process title (``ray::TaskRunner``, ``ray::Colocated_actor_rollout``),
vLLM's engine processes, Ray's own daemons, the pytest processes, and ``other``. Each kind's row gives
its processes, CPU-seconds and share of all CPU-seconds the machine spent while the command ran (the
rest of that total is what polling missed: processes that ended between two polls, ``--interval``).

    .venv/bin/python bench/suite_cpu.py                          # make test's pytest command (~20 min)
    .venv/bin/python bench/suite_cpu.py -- .venv/bin/python -m pytest -q tests/trainer/test_e2e_on_cpu.py

``make bench`` runs it on the whole suite like every bench script (``--markdown``: the table for
docs/benchmarks.md, "The test suite").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from refresh_docs import write_fragment

ROOT = Path(__file__).resolve().parents[1]
SUITE = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "tests"]
TICKS = os.sysconf("SC_CLK_TCK")
RAY_DAEMONS = ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env")


def machine_busy_seconds() -> float:
    """CPU-seconds every core of the machine has spent outside idle and iowait since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS


def process_kind(pid: str) -> str | None:
    """The kind a process counts under, from its title and command line (None once it is gone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if cmdline.startswith("ray::"):  # a Ray worker's title: ray::[<actor name>:]<Class>[.<method>]
        return "ray::" + cmdline.split()[0].split(".")[0].rsplit(":", 1)[-1]
    if comm.startswith("VLLM::"):
        return comm
    for daemon in RAY_DAEMONS:
        if daemon in cmdline.split(" --", 1)[0]:
            return f"ray daemon: {daemon}"
    args = cmdline.split()
    if len(args) > 2 and args[1] == "-m" and args[2].startswith("verl_lite."):
        return f"{args[2]} (child process of a test)"  # before pytest: its run folder names pytest
    if len(args) > 1 and args[1].endswith(".py") and "/examples/" in args[1]:
        return f"examples/{Path(args[1]).name}"
    if "pytest" in cmdline or "execnet" in cmdline or "exec(eval(sys.stdin" in cmdline:
        return "pytest"
    return "other python" if "python" in cmdline else "other"


def cpu_seconds(pid: str) -> tuple[str, float] | None:
    """(start time, CPU-seconds so far) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19], (int(fields[11]) + int(fields[12])) / TICKS


def poll(command: list[str], interval: float) -> tuple[float, float, dict[tuple[str, str], list]]:
    """Run ``command``; its wall seconds, the machine's busy CPU-seconds, and per process (pid, start
    time) its [kind, CPU-seconds when first seen, CPU-seconds when last seen]."""
    seen: dict[tuple[str, str], list] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):  # what runs already counts from now on
        if (stat := cpu_seconds(pid)) is not None:
            seen[(pid, stat[0])] = ["before", stat[1], stat[1]]
    start, busy = time.monotonic(), machine_busy_seconds()
    child = subprocess.Popen(command, cwd=ROOT)
    while child.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if (stat := cpu_seconds(pid)) is None:
                continue
            entry = seen.setdefault((pid, stat[0]), [None, 0.0, 0.0])
            entry[2] = stat[1]
            # a Ray worker takes its actor's title later; before, its command line may name a test's
            # folder (a runtime env's variables), which reads as pytest
            if entry[0] in (None, "other python", "ray::IDLE", "pytest"):
                entry[0] = process_kind(pid) or entry[0]
        time.sleep(interval)
    return time.monotonic() - start, machine_busy_seconds() - busy, seen


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between two polls of /proc")
    parser.add_argument("--top", type=int, default=25, help="rows to print, the costliest kinds first")
    parser.add_argument(
        "command", nargs="*", help="what to run (after --); default: the suite as make test runs it"
    )
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = parser.parse_args()
    wall, busy, seen = poll(args.command or SUITE, args.interval)
    cpu, count = Counter(), Counter()
    for kind, first, last in seen.values():
        if last > first:
            kind = {"before": "already running (kernel, tools)", None: "other"}.get(kind, kind)
            cpu[kind] += last - first
            count[kind] += 1
    rows = [
        [kind, str(count[kind]), f"{seconds / count[kind]:.1f}", f"{seconds:.0f}", f"{seconds / busy:.1%}"]
        for kind, seconds in cpu.most_common(args.top)
    ]
    missed = busy - sum(cpu.values())
    rows.append(
        ["not seen by polling (ended between two polls)", "", "", f"{missed:.0f}", f"{missed / busy:.1%}"]
    )
    header = ["kind", "processes", "CPU-s each", "CPU-s", "share"]
    note = (
        f"`{' '.join(args.command or ['pytest', *SUITE[3:]])}`: {wall:.0f} s, the machine busy {busy:.0f} CPU-s "
        f"({busy / wall:.2f} cores on average)."
    )
    print(note)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
            )
        )
    if args.markdown:
        write_fragment(args.markdown, header, rows, note)


if __name__ == "__main__":
    main()
