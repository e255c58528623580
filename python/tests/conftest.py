"""Shared fixtures: the repository's models and fixtures, the CLI, a small classification set."""
import os
import shutil

import pytest

ROOT = os.path.abspath(os.environ.get("AFINAR_SRC") or os.path.join(os.path.dirname(__file__), "..", ".."))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIX = os.path.join(ROOT, "tests", "fixtures")
CLI = os.environ.get("AFINAR_BIN") or os.path.join(ROOT, "build", "afinar")

# one compute thread per test process keeps the shared CI machine responsive; results do not depend on it
THREADS = int(os.environ.get("AFINAR_TEST_THREADS", "2"))


@pytest.fixture(scope="session")
def smol_path():
    if not os.path.exists(SMOL):
        pytest.skip("%s missing: run scripts/setup.sh (it fetches the models)" % SMOL)
    return SMOL


@pytest.fixture(scope="session")
def smol(smol_path):
    import afinar
    m = afinar.Model(smol_path, threads=THREADS)
    yield m
    m.close()


@pytest.fixture(scope="session")
def cli():
    if not os.access(CLI, os.X_OK):
        pytest.skip("%s missing: build it with make (or set AFINAR_BIN)" % CLI)
    return CLI


def sentiment(n=16):
    base = [("great movie, loved it", "pos"), ("terrible, boring film", "neg"), ("wonderful acting", "pos"),
            ("awful plot and bad jokes", "neg")]
    return [{"text": t, "label": l} for t, l in (base * ((n + 3) // 4))[:n]]


@pytest.fixture
def tmpdir_clean(tmp_path):
    yield str(tmp_path)
    shutil.rmtree(str(tmp_path), ignore_errors=True)


# settings of the short runs: 2 optimizer steps on the top 2 layers, 16 tokens
TINY_RUN = dict(recipe="fixed", max_steps=2, batch=2, grad_accum=1, max_seq_len=16, lora_layers="top2",
                threads=THREADS, plot=False)
