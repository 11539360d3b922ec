"""Run mutmut over the search modules and print the mutation score.

score = killed / (killed + survived + timeouts-not-counted-as-killed), as mutmut reports them;
mutants that time out are counted as killed (the suite did not pass), as mutmut itself does.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys


def main() -> int:
    # mutmut forks one child per mutant: torch's thread pool does not survive a fork, so one thread
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.run(["mutmut", "run", "--max-children", "2"], check=False, env=env,
                   stdout=subprocess.DEVNULL)
    out = subprocess.run(["mutmut", "results", "--all", "true"], capture_output=True, text=True).stdout
    status = collections.Counter(line.rsplit(":", 1)[1].strip() for line in out.splitlines() if ":" in line)
    killed = status["killed"] + status["timeout"]
    total = killed + status["survived"] + status["suspicious"]
    print(dict(status))
    if total == 0:
        print("no mutants ran")
        return 1
    score = killed / total
    print(f"mutation score {score:.3f} ({killed} killed of {total}; {status['survived']} survived)")
    for line in out.splitlines():
        if line.endswith(": survived"):
            print("  survived:", line.split(":")[0].strip())
    return 0 if score >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
