import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest
from hypothesis import Phase, settings

# CI runs the same examples every time; locally, hypothesis explores new ones.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Under mutation testing (mutmut sets MUTANT_UNDER_TEST): fewer fixed examples and no shrinking,
# so a killed mutant is reported in seconds.
settings.register_profile("mutation", derandomize=True, deadline=None, max_examples=15,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
if os.environ.get("MUTANT_UNDER_TEST"):
    settings.load_profile("mutation")
    try:  # mutmut forks per mutant; torch's thread pool must not be running in the parent
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass

MUTANT_TEST_CPU_SECONDS = 30
"""Under a mutant, a test that spends this much CPU time fails: the mutant turned it into a hang
(the slowest test of the mutated subset takes about 6 s). mutmut's own limit is per mutant, 30 s
plus 30 times the clean time of all its tests, which for the engine's functions (covered by nearly
every test) is most of an hour per hanging mutant."""


@pytest.fixture(scope="session", autouse=True)
def _fresh_caches_under_a_mutant():
    """mutmut forks each mutant's run from a process that has already run the tests: the caches
    the package keeps per process (compiled grammars and their tokenizers, mask tables per dtype)
    would come filled by the unmutated code, and a mutant of the code that fills them would never
    run. Under a mutant they start empty."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        from beamsearch.backends import bits

        bits._BIASES.clear()
        try:
            from beamsearch.backends.torch_backend import TorchBackend
            from beamsearch.processors import grammar_engine

            TorchBackend._biases.clear()
            grammar_engine._COMPILED.clear()
            grammar_engine._TOKENIZERS.clear()
        except ImportError:
            pass
    yield


@pytest.fixture(autouse=True)
def _cpu_limit_under_a_mutant():
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        yield
        return
    import signal

    def hang(signum, frame):
        raise TimeoutError(f"the test spent {MUTANT_TEST_CPU_SECONDS} s of CPU under mutant "
                           f"{os.environ['MUTANT_UNDER_TEST']}")

    previous = signal.signal(signal.SIGPROF, hang)
    signal.setitimer(signal.ITIMER_PROF, MUTANT_TEST_CPU_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@pytest.fixture(params=["prompt in place", "model's cache"])
def layout(request, monkeypatch):
    """Both cache layouts of the causal adapter, whatever the prompt and output lengths: the
    prompt kept in place (preallocated buffers, only generated columns gathered at a reorder)
    and each reorder deferred into the next cache write (``DeferredLayer``)."""
    hf = pytest.importorskip("beamsearch.hf")

    keep = request.param == "prompt in place"
    monkeypatch.setattr(hf.adapters, "keeps_prompt", lambda width, room: keep)
    return keep
