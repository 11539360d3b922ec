"""Run mutmut over the search modules, print the mutation score and write the survivors file.

    python tools/mutation_score.py                        # run mutmut, then score every mutant
    python tools/mutation_score.py 'beamsearch.core.engine.*' # run and score only the matching mutants
    python tools/mutation_score.py --no-run               # score the results mutmut already stored

score = killed / all mutants. Every mutant that ``mutmut results --all true`` lists is in the
denominator, whatever its status. mutmut 3.8.1 (``mutmut.stats.status_by_exit_code``) knows these
statuses:

    killed, timeout, caught by type check       count as killed
    survived, suspicious, no tests, skipped,    count against the score
    segfault, not checked,
    check was interrupted by user

(and any status a later mutmut adds counts against the score too).

Why a timeout counts as killed: mutmut gives each mutant a CPU-time limit of
``(estimated time of its tests + timeout_constant) * timeout_multiplier * 2`` seconds, 30 s plus 30x
its tests' clean running time with the defaults (1.0, 15.0). A mutant that exceeds it has turned the
covering tests into a hang (e.g. a search loop that never stops): the suite did not pass, so the
mutant is detected, which is why mutmut gives it its own status, apart from ``survived`` (the tests
passed, exit code 0). Timeouts are still shown in the table and listed, with their diffs, at the end
of the survivors file, so that one caused by an overloaded machine can be spotted (``--max-children
2`` keeps the load low). ``caught by type check`` is a kill by the type checker; it cannot happen
here, as no ``type_check_command`` is configured. No other status shows that the suite detects the
mutant: a survivor, a mutant no test covers, one that was never run (``not checked``: the run was cut
short or never reached it), a crash (``segfault``, ``suspicious``), an interruption, a skip.

Writes ``tools/mutation_survivors.txt`` (with MUTANT_GLOBs, only where ``--survivors`` says): each
mutant that does not count as killed, its name, its status and its diff (``mutmut show NAME``).
Prints a per-module table of the counts of each status. Exit code 0 when the score is >= 0.90, 1
below it (or when there are no mutants), 2 when mutmut itself fails (e.g. the clean test run fails).
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
SURVIVORS = ROOT / "tools" / "mutation_survivors.txt"
THRESHOLD = 0.90

# mutmut 3.8.1, mutmut/stats.py: the values of status_by_exit_code (its default is "suspicious")
KILLED = ("killed", "timeout", "caught by type check")
NOT_KILLED = ("survived", "suspicious", "no tests", "skipped", "segfault", "not checked",
              "check was interrupted by user")
STATUSES = KILLED + NOT_KILLED

# `mutmut results` prints "    <module>.<mangled function>__mutmut_<n>: <status>" per mutant
_LINE = re.compile(r"^\s*(?P<name>\S+__mutmut_\d+): (?P<status>\S.*?)\s*$")


def parse_results(text: str) -> tuple[dict[str, str], list[str]]:
    """``mutmut results --all true`` output -> ({mutant name: status}, lines not understood)."""
    statuses: dict[str, str] = {}
    unparsed = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            unparsed.append(line)
        else:
            statuses[m["name"]] = m["status"]
    return statuses, unparsed


def module_of(name: str) -> str:
    """``beamsearch.core.engine.x_run__mutmut_3`` or ``beamsearch.processors.xǁTopKǁ__call____mutmut_1``
    -> the module, ``beamsearch.core.engine`` / ``beamsearch.processors``."""
    function = name.rsplit("__mutmut_", 1)[0]
    return function.rsplit(".", 1)[0]


def is_killed(status: str) -> bool:
    return status in KILLED


def score(statuses: dict[str, str]) -> tuple[int, int, float]:
    """(mutants counted as killed, all mutants, killed / all; 0.0 when there are none)."""
    total = len(statuses)
    killed = sum(is_killed(s) for s in statuses.values())
    return killed, total, killed / total if total else 0.0


def table(statuses: dict[str, str]) -> str:
    """Per module: the number of mutants, the count of each status that occurs, the score."""
    by_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, status in statuses.items():
        by_module[module_of(name)][status] += 1
    seen = {s for s in statuses.values()}
    columns = [s for s in STATUSES if s in seen] + sorted(seen - set(STATUSES))
    header = ["module", "mutants", *columns, "score"]
    rows = []
    for module in sorted(by_module) + ["all"]:
        counts = sum(by_module.values(), collections.Counter()) if module == "all" else by_module[module]
        total = sum(counts.values())
        killed = sum(n for s, n in counts.items() if is_killed(s))
        rows.append([module, str(total), *(str(counts[c]) for c in columns), f"{killed / total:.3f}"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for j, r in enumerate([header, *rows]):
        if j == len(rows):  # a rule above the total
            lines.append("  ".join("-" * w for w in widths))
        cells = enumerate(zip(r, widths, strict=True))
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in cells))
    return "\n".join(lines)


def mutmut_show(name: str) -> str:
    """The diff of one mutant, as ``mutmut show NAME`` prints it (without its ``# name: status``)."""
    r = subprocess.run(["mutmut", "show", name], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        return f"(mutmut show failed, exit {r.returncode}: {(r.stdout + r.stderr).strip()[-500:]})"
    lines = r.stdout.rstrip("\n").splitlines()
    if lines and lines[0].startswith(f"# {name}:"):
        lines = lines[1:]
    return "\n".join(lines)


def survivors_text(statuses: dict[str, str], show: Callable[[str], str] | None = None) -> str:
    """Every mutant that does not count as killed, by status then name, with its diff; then the
    timeouts (counted as killed), so that a spurious one can be spotted."""
    show = show if show is not None else mutmut_show
    killed, total, s = score(statuses)
    out = [f"# mutation score {s:.3f} = {killed} killed / {total} mutants; the {total - killed} not killed:"]
    order = {status: i for i, status in enumerate(NOT_KILLED)}
    not_killed = sorted((n for n, st in statuses.items() if not is_killed(st)),
                        key=lambda n: (order.get(statuses[n], len(order)), statuses[n], n))
    for name in not_killed:
        out += [f"## {name}: {statuses[name]}", show(name)]
    timeouts = sorted(n for n, st in statuses.items() if st == "timeout")
    if timeouts:
        out.append(f"# counted as killed: {len(timeouts)} timeouts")
        for name in timeouts:
            out += [f"## {name}: timeout", show(name)]
    return "\n".join(out) + "\n"


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.replace("\r", "\n").rstrip().splitlines()[-lines:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("patterns", nargs="*", metavar="MUTANT_GLOB",
                        help="only run and score the mutants matching these globs, e.g. 'beamsearch.core.engine.*'")
    parser.add_argument("--no-run", action="store_true", help="do not run mutmut; score its stored results")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="the lowest passing score (0.90)")
    parser.add_argument("--survivors", type=pathlib.Path, default=None,
                        help=f"where to write the survivors (default {SURVIVORS.relative_to(ROOT)}; with "
                             "MUTANT_GLOBs, only when given, so a partial run does not overwrite the full list)")
    args = parser.parse_args(argv)

    if not args.no_run:
        # mutmut forks one child per mutant: torch's thread pool does not survive a fork, so one thread
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        r = subprocess.run(["mutmut", "run", "--max-children", "2", *args.patterns], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(f"mutmut run failed (exit {r.returncode}); no score. Its last lines:\n{tail(r.stdout or '')}")
            return 2
    r = subprocess.run(["mutmut", "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"mutmut results failed (exit {r.returncode}):\n{tail(r.stdout + r.stderr)}")
        return 2
    statuses, unparsed = parse_results(r.stdout)
    for line in unparsed:
        print(f"warning: not a mutant line in mutmut's results: {line!r}")
    if args.patterns:
        statuses = {n: s for n, s in statuses.items() if any(fnmatch.fnmatch(n, p) for p in args.patterns)}
    if not statuses:
        print("no mutants")
        return 1
    print(table(statuses))
    survivors = args.survivors if args.survivors is not None or args.patterns else SURVIVORS
    if survivors is not None:
        survivors.write_text(survivors_text(statuses))
    killed, total, s = score(statuses)
    verdict = "ok" if s >= args.threshold else f"BELOW {args.threshold:.2f}"
    print(f"mutation score {s:.3f} ({killed} killed of {total} mutants; timeouts count as killed): {verdict}")
    if survivors is not None:
        print(f"the {total - killed} not killed, with their diffs: {survivors}")
    return 0 if s >= args.threshold else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
