"""Plant each known pitfall into a copy of the package and check that the test suite kills it.

The pitfalls are those of the course chapter (seed 000, section 5) and of the batched search
(seed 001 and SPEC section 9). Each is one textual change to one module; the suite runs against
the changed copy (PYTHONPATH first), and must fail.

Before planting anything, every original text is checked to occur exactly once in its module (a
pitfall whose text does not is reported as BROKEN and not run), and the same pytest command runs on
an unchanged copy: if that baseline fails, a failing suite says nothing about a pitfall, so the
script stops with exit code 2 and the tail of pytest's output instead of reporting kills.

Exit codes: 0 every pitfall killed; 1 a pitfall survived or could not be planted; 2 the baseline
fails (or an unknown pitfall id was asked for).

    python tools/pitfall_mutants.py            # all
    python tools/pitfall_mutants.py s03 s09    # some
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (id, pitfall, module under src/beamsearch, original text, planted text)
PITFALLS = [
    ("s01", "keeping the best K tokens of each hypothesis", "core/select.py",
     "    start, counts = runs(beam.input)  # --> [G] each",
     "    start, counts = np.arange(beam.size), np.ones(beam.size, np.int64)  # --> [G] each"),
    ("s02", "adding raw logits instead of log-probabilities", "core/engine.py",
     "logp = backend.log_softmax(x, out=x if x is not logits else buffer)", "logp = backend.copy(x)"),
    ("s03", "state rows not gathered by parent", "core/engine.py",
     "new_state = select_state(new_state, index(parent))", "pass"),
    ("s04", "an eos hypothesis that keeps going", "strategies/narrowing.py",
     "return Selection(kept.take(~done), finished, True)", "return Selection(kept, finished, True)"),
    ("s05", "dropping the live hypotheses at max_len", "core/engine.py",
     "done.append((beam, live.take(retire), step, False))", "pass"),
    ("s06", "eos left out of the length", "core/results.py",
     "scores = score(ended.logprob, ended.step, penalty, alpha)",
     "scores = score(ended.logprob, ended.step - ended.finished, penalty, alpha)"),
    ("s07", "results ranked by logprob, not score", "core/results.py",
     "rank = np.lexsort((order, unfinished, -scores, ended.input))",
     "rank = np.lexsort((order, unfinished, -ended.logprob, ended.input))"),
    ("s08", "ties to the highest index", "backends/ties.py",
     "order = np.lexsort((idx, -val))", "order = np.lexsort((-idx, -val))"),
    ("s08t", "ties at the top-k boundary to the highest index, on torch", "backends/torch_backend.py",
     "take = greater | (equal & (torch.cumsum(equal, dim=1) <= need))",
     "take = greater | (equal & (torch.cumsum(equal.flip(1), dim=1).flip(1) <= need))"),
    ("s09", "keeping -inf candidates to fill the beam", "core/select.py",
     "grp, rank = np.nonzero(np.isfinite(val) & ", "grp, rank = np.nonzero((val == val) & "),
    ("s09m", "keeping -inf candidates to fill the beam, in the per-row top-m merge", "core/select.py",
     "grp, rank = np.nonzero(np.isfinite(best) & ", "grp, rank = np.nonzero((best == best) & "),
    ("s11", "survivors finalized one step early", "core/engine.py",
     "retire = controls.max_steps[inputs] <= step", "retire = controls.max_steps[inputs] <= step + 1"),
    ("s13", "a NamedTuple rebuilt as a tuple", "core/state.py",
     "return type(state)._make(items)", "return tuple(items)"),
    ("s14", "lists not searched", "core/state.py",
     "items = [select_state(item, idx) for item in state]\n    return items if",
     "items = list(state)\n    return items if"),
    ("s15", "greedy scored with length penalty 1", "modes/beam.py",
     "max_len=max_len, length_penalty=0.0,", "max_len=max_len, length_penalty=1.0,"),
    ("s16", "the model called after every hypothesis finished", "core/engine.py",
     "        if beam.size == 0:\n            break\n", "        if False:\n            break\n"),
    ("b01", "early stop bounded by the current score (seed 001)", "strategies/batch.py",
     "/ self.bound_divisor[inputs[start]]", "/ self.penalty(np.asarray(scores.step), self.alpha)"),
    ("b02", "n-gram blocking ignores the prompt", "core/engine.py",
     "prompts = controls.prompts or [[] for _ in range(n)]", "prompts = [[] for _ in range(n)]"),
    ("b03", "top-k drops the values tied at the threshold", "backends/numpy_backend.py",
     "x[x < threshold] = NEG_INF", "x[x <= threshold] = NEG_INF"),
    ("b04", "a finished hypothesis takes a beam slot in the batched search", "strategies/batch.py",
     "width = np.full(state.n_finished.shape[0], self.beam_size)",
     "width = np.maximum(self.beam_size - state.n_finished, 0)"),
    ("b05", "GNMT penalty without the +5", "core/penalties.py",
     "((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha",
     "(np.asarray(length, dtype=np.float64) / 6.0) ** alpha"),
    # one planted fault per SPEC section 10 bullet
    ("c01", "several eos ids: only the first finishes", "core/validate.py",
     "return np.unique(np.asarray(token_list(name, value), dtype=np.int64))",
     "return np.unique(np.asarray(token_list(name, value), dtype=np.int64))[:1]"),
    ("c02", "per-input max_steps: every input stops at input 0's limit", "core/engine.py",
     "retire = controls.max_steps[inputs] <= step", "retire = controls.max_steps[0] <= step + 0 * inputs"),
    ("c03", "min_new_tokens: eos allowed one step early", "controls/min_new_tokens.py",
     "if ctx.step > self.m:", "if ctx.step >= self.m:"),
    ("c04", "min_new_tokens: a stop sequence finishes at step m", "controls/stop_sequences.py",
     "if step <= self.min_new_tokens or", "if step < self.min_new_tokens or"),
    ("c05", "stop sequences: a completion also competes for a beam slot", "core/select.py",
     "        logp = b.put(logp, term.rows, term.tokens, NEG_INF)\n", ""),
    ("c06", "prefix: forced before log_softmax (assumed, not scored)", "controls/shared.py",
     "controls = Controls(k.eos, steps, tuple(processors), masks,",
     "controls = Controls(k.eos, steps, tuple(processors) + masks, (),"),
    ("c07", "production order within a step: by token before row", "core/select.py",
     "order = np.lexsort((tokens, rows))", "order = np.lexsort((rows, tokens))"),
    ("c08", "the user's processors run before the built-in ones", "controls/shared.py",
     "    processors.extend(k.user)\n", "    processors[:0] = k.user\n"),
    ("c09", "score_sequences: a stop sequence at step m counts as finished", "modes/score.py",
     "len(t) > stops.min_new_tokens and", "len(t) >= stops.min_new_tokens and"),
    ("c10", "stop sequences matched against the prompt too", "core/engine.py",
     "        recent = np.full((n, controls.stops.window), -1, np.int64)\n",
     "        recent = np.full((n, controls.stops.window), 1, np.int64)\n"),
]


PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests"]
TAIL_LINES = 40


def text_problems(src: pathlib.Path, pitfalls: list[tuple[str, str, str, str, str]]) -> dict[str, str]:
    """Pitfall id -> why it cannot be planted (its module is missing, or its original text does
    not occur exactly once there); pitfalls that can be planted are absent."""
    problems = {}
    for pid, _what, module, old, _new in pitfalls:
        path = src / module
        if not path.is_file():
            problems[pid] = f"module {module} not found in {src}"
            continue
        count = path.read_text().count(old)
        if count != 1:
            problems[pid] = f"the text to replace occurs {count} times in {module} (must be exactly once)"
    return problems


def run_suite(src: pathlib.Path, command: list[str], change: tuple[str, str, str] | None = None
              ) -> subprocess.CompletedProcess:
    """Run ``command`` (from the repository root) against a copy of the package ``src`` placed
    first on PYTHONPATH, with ``change = (module, old, new)`` applied to the copy when given."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = pathlib.Path(tmp) / src.name
        shutil.copytree(src, pkg)
        if change is not None:
            module, old, new = change
            path = pkg / module
            path.write_text(path.read_text().replace(old, new, 1))
        env = dict(os.environ, PYTHONPATH=tmp, MUTANT_UNDER_TEST="pitfall")
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


def output_tail(r: subprocess.CompletedProcess, lines: int = TAIL_LINES) -> str:
    return "\n".join((r.stdout + r.stderr).rstrip().splitlines()[-lines:])


def run_baseline(src: pathlib.Path, command: list[str]) -> tuple[bool, str]:
    """The suite on an unchanged copy of the package: (it passed, the tail of its output)."""
    r = run_suite(src, command)
    return r.returncode == 0, output_tail(r)


def run_one(src: pathlib.Path, module: str, old: str, new: str, command: list[str] = PYTEST) -> bool:
    """True when the suite fails (the pitfall is killed)."""
    return run_suite(src, command, (module, old, new)).returncode != 0


def main(argv: list[str], src: pathlib.Path | None = None, command: list[str] | None = None) -> int:
    src = src if src is not None else ROOT / "src" / "beamsearch"
    command = command if command is not None else PYTEST
    unknown = sorted(set(argv) - {p[0] for p in PITFALLS})
    if unknown:
        print(f"unknown pitfall ids: {' '.join(unknown)} (known: {' '.join(p[0] for p in PITFALLS)})")
        return 2
    chosen = [p for p in PITFALLS if not argv or p[0] in argv]
    problems = text_problems(src, chosen)  # all of them, before anything runs
    for pid, problem in problems.items():
        print(f"{pid}  BROKEN    {problem}", flush=True)
    runnable = [p for p in chosen if p[0] not in problems]
    if not runnable:
        print(f"0 of {len(chosen)} pitfalls killed; none could be planted")
        return 1
    ok, tail = run_baseline(src, command)
    if not ok:
        print("baseline FAILED: the test suite fails on the unchanged package, so a failing suite would not "
              "show that a pitfall is killed; no pitfall was run. Fix the suite first.\n"
              f"command: {' '.join(command)}\n--- last {TAIL_LINES} lines of pytest's output ---\n{tail}")
        return 2
    print("baseline  passes  the unchanged package", flush=True)
    survived = []
    for pid, what, module, old, new in runnable:
        killed = run_one(src, module, old, new, command)
        print(f"{pid}  {'killed  ' if killed else 'SURVIVED'}  {what}", flush=True)
        if not killed:
            survived.append(pid)
    print(f"{len(runnable) - len(survived)} of {len(chosen)} pitfalls killed"
          + (f"; {len(problems)} could not be planted: {' '.join(problems)}" if problems else ""))
    return 1 if survived or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
