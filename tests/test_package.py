"""What the notebooks cannot test about themselves: the committed library is exactly `nbdev_export` of the notebooks,
and the exported package works on its own, with no notebooks anywhere near it."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "mamba3_lite"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "_tmp*", "_proc")


def _py_files(lib: Path) -> dict:
    return {p.relative_to(lib).as_posix(): p.read_bytes() for p in sorted(lib.rglob("*.py")) if "__pycache__" not in p.parts}


def test_library_equals_nbdev_export(tmp_path):
    "Export the repo's notebooks into an empty copy of the project: every module must come out byte-equal to the committed one."
    pytest.importorskip("nbdev")
    exe = shutil.which("nbdev_export")
    if exe is None:
        pytest.skip("nbdev_export is not on PATH")
    shutil.copytree(REPO / "nbs", tmp_path / "nbs", ignore=IGNORE)
    for f in ("settings.ini", "setup.py", "pyproject.toml"):
        if (REPO / f).exists():
            shutil.copy2(REPO / f, tmp_path / f)
    r = subprocess.run([exe], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"nbdev_export failed:\n{r.stdout}\n{r.stderr}"
    exported, committed = _py_files(tmp_path / "mamba3_lite"), _py_files(LIB)
    missing, extra = sorted(set(exported) - set(committed)), sorted(set(committed) - set(exported))
    assert not missing, f"exported from the notebooks but not in mamba3_lite/: {missing}"
    assert not extra, f"in mamba3_lite/ but not produced by any notebook (hand-written?): {extra}"
    differ = [f for f in exported if exported[f] != committed[f]]
    assert not differ, f"mamba3_lite/ differs from nbdev_export of nbs/ in {differ}: run nbdev_export and commit both"


SMOKE = textwrap.dedent("""
    import importlib, pkgutil, sys
    from pathlib import Path
    import torch
    import mamba3_lite
    here = Path(sys.argv[1]).resolve()
    assert Path(mamba3_lite.__file__).resolve().parent == here / "mamba3_lite", mamba3_lite.__file__
    assert not any((p / "nbs").exists() for p in [here, *here.parents][:2])
    mods = [m.name for m in pkgutil.walk_packages(mamba3_lite.__path__, "mamba3_lite.")
            if not m.name.rsplit(".", 1)[-1].startswith("_") and not m.name.startswith("mamba3_lite.ssd.triton")
            and m.name not in ("mamba3_lite.mamba3.siso_triton",                  # chapter 09f: the Mamba-3 scan's Triton path
                               "mamba3_lite.loss_triton")]                        # chapter 05f: the loss head's Triton kernel
    for name in mods:
        importlib.import_module(name)
    assert "triton" not in sys.modules, "importing the package (Triton kernels aside) must not import triton"
    for name in mamba3_lite.__all__:
        assert getattr(mamba3_lite, name).__name__ == name, name
    from mamba3_lite.model import Mamba3Transformer, ModelConfig
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=4, chunk_size=8, ffn_dim=64)
    model = Mamba3Transformer(cfg.to_dict())
    idx = torch.randint(0, 64, (2, 19))
    logits = model(idx)
    assert logits.shape == (2, 19, 64) and logits.dtype == torch.float32 and torch.isfinite(logits).all()
    logits.logsumexp(-1).mean().backward()
    state, steps = model.init_state(2), []
    with torch.no_grad():
        for t in range(19):
            lg, state = model.step(idx[:, t], state)
            steps.append(lg)
    assert torch.allclose(torch.stack(steps, 1), logits.detach(), rtol=1e-4, atol=1e-5)
    assert model.generate(idx[:, :3], 4, temperature=0).shape == (2, 7)
    print("OK", sorted(mods))
""")


def test_package_works_without_notebooks(tmp_path):
    "Copy only mamba3_lite/ to an empty directory and use it from there in a fresh interpreter."
    shutil.copytree(LIB, tmp_path / "mamba3_lite", ignore=IGNORE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ENABLE_TRITON_KERNELS", None)
    r = subprocess.run([sys.executable, "-c", SMOKE, str(tmp_path)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "OK" in r.stdout and "'mamba3_lite.model'" in r.stdout and "'mamba3_lite.train.trainer'" in r.stdout, r.stdout


def test_public_names_from_a_clean_interpreter():
    "The acceptance line of the re-layout: the original's names straight from the package."
    code = "import mamba3_lite as m; print(m.Mamba3Transformer, m.ssd_naive_complex)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Mamba3Transformer" in r.stdout and "ssd_naive_complex" in r.stdout, r.stderr
