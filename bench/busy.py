#!/usr/bin/env python3
"""Which resource a command waits on. Prints what the machine's cores did
over the command's run (from /proc/stat: busy, stolen by the host of a
virtual machine, idle, waiting on the disk), and samples the state of
every thread of the command (and of the processes given with --also, such
as evi-server) every 10 ms from /proc, to tell how much of the wall time

  - two or more of those threads were runnable (on a 2-core machine: both
    cores busy, or wanted by them),
  - exactly one was, or none,
  - at least one was waiting on the disk (state D), and
  - the command's main thread was running, sleeping (waiting for another
    thread, the network or a lock) or waiting on the disk.

    bench/busy.py [--also PID]... -- COMMAND [ARG]...

Used by bench/RESULTS.md ("Which resource stops the first sync", issue
26). Sampling costs the machine a few percent of one core; the shares are
what it is for, not the wall time it prints.
"""

import os
import subprocess
import sys
import time

PERIOD = 0.01


def tasks(pid):
    try:
        return [(pid, int(t)) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def state(pid, tid):
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    # The state follows the parenthesised name, which may hold spaces.
    return chr(s[s.rindex(b")") + 2])


def cpu_ticks():
    """user, nice, system, idle, iowait, irq, softirq, steal of all cores."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:9]
    return [int(x) for x in fields]


def main(argv):
    also = []
    while argv and argv[0] == "--also":
        also.append(int(argv[1]))
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        sys.exit(__doc__)
    before = cpu_ticks()
    child = subprocess.Popen(argv[1:])
    counts = {"2+": 0, "1": 0, "0": 0}
    disk = 0
    # Samples with a core left free (fewer than two runnable), split by
    # whether some thread was waiting on the disk then: what the free core
    # waited for, the disk or something else (the network, the server,
    # one stage for another).
    free_disk = 0
    free_other = 0
    main_state = {"R": 0, "S": 0, "D": 0, "other": 0}
    samples = 0
    start = time.monotonic()
    while child.poll() is None:
        running = 0
        waiting_disk = False
        for pid in [child.pid, *also]:
            for p, t in tasks(pid):
                st = state(p, t)
                if st == "R":
                    running += 1
                elif st == "D":
                    waiting_disk = True
                if p == child.pid and t == child.pid and st is not None:
                    main_state[st if st in "RSD" else "other"] += 1
        samples += 1
        counts["2+" if running >= 2 else str(running)] += 1
        disk += waiting_disk
        if running < 2:
            free_disk += waiting_disk
            free_other += not waiting_disk
        time.sleep(PERIOD)
    wall = time.monotonic() - start
    d = [b - a for a, b in zip(before, cpu_ticks())]
    total = sum(d) or 1
    user, nice, system, idle, iowait, irq, softirq, steal = d
    if samples == 0:
        sys.exit("the command ended before the first sample")

    def pct(n):
        return f"{100 * n / samples:.0f}%"

    def share(n):
        return f"{100 * n / total:.0f}%"

    print(
        f"cores ({os.cpu_count()}) over the run: busy {share(user + nice + system + irq + softirq)}, "
        f"stolen by the host {share(steal)}, idle {share(idle)}, waiting on the disk "
        f"{share(iowait)}",
        file=sys.stderr,
    )
    print(
        f"busy: {samples} samples over {wall:.2f} s; threads runnable: "
        f"2+ {pct(counts['2+'])}, 1 {pct(counts['1'])}, 0 {pct(counts['0'])}; "
        f"some thread waiting on the disk {pct(disk)}; main thread: "
        f"running {pct(main_state['R'])}, sleeping {pct(main_state['S'])}, "
        f"on the disk {pct(main_state['D'])}",
        file=sys.stderr,
    )
    print(
        f"a core free (fewer than 2 runnable) {pct(free_disk + free_other)}: with some thread "
        f"on the disk {pct(free_disk)}, with none {pct(free_other)}",
        file=sys.stderr,
    )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
