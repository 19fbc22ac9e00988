"""The paper's Mamba-3 layer as a model variant (`ModelConfig(mixer="mamba3", mimo_rank=r)`), on CPU with tiny shapes:
the default stays the original model, decoding equals the forward, the trainer trains and resumes it bit-identically,
and the Hugging Face export round-trips it.
"""
import json
from pathlib import Path

import pytest
import torch

from mamba3_lite.model import ModelConfig, Mamba3Transformer
from mamba3_lite.mamba3.block import Mamba3SISOBlock
from mamba3_lite.train.config import TrainingConfig
from mamba3_lite.train.export import from_pretrained, save_pretrained
from mamba3_lite.train.trainer import Pretrainer
from test_training import byte_corpus                       # the shared byte shards of the built-in corpus

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
TINY = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, head_dim=8, state_dim=4, chunk_size=8, ffn_dim=64, mixer="mamba3")


def test_default_is_the_original_model():
    with torch.device("meta"):
        m = Mamba3Transformer(ModelConfig())
    assert (m.cfg.mixer, m.cfg.mimo_rank) == ("lite", 1)
    assert sum(p.numel() for p in m.parameters()) - 28 * 16 == 433_662_400     # the original's count (complex A once)
    assert not any(isinstance(b, Mamba3SISOBlock) for b in m.layers)


@pytest.mark.parametrize("bad, field", [(dict(mixer="mamba2"), "mixer"), (dict(mimo_rank=4), "mimo_rank"),
                                        (dict(mixer="mamba3", mimo_rank=0), "mimo_rank"),
                                        (dict(mixer="mamba3", ssd_dispatch="triton", mimo_rank=2), "ssd_dispatch")])
def test_bad_config_names_the_field(bad, field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig(**bad)


@pytest.mark.parametrize("rank", [1, 2])
def test_step_and_generate_equal_forward(rank):
    torch.manual_seed(0)
    model = Mamba3Transformer(ModelConfig(**TINY, mimo_rank=rank)).double().eval()
    assert all(isinstance(b, Mamba3SISOBlock) and b.R == rank for b in model.layers)
    idx = torch.randint(0, 50, (2, 19))
    with torch.no_grad():
        full = model(idx)
        state, out = [tuple(t.double() for t in s) for s in model.init_state(2)], []
        for t in range(19):
            lg, state = model.step(idx[:, t], state)
            out.append(lg)
        torch.testing.assert_close(torch.stack(out, 1), full, rtol=1e-9, atol=1e-10)
        pre, st = model(idx[:, :11], return_state=True)                      # prefill, then continue by forward
        torch.testing.assert_close(torch.cat([pre, model(idx[:, 11:], st)], 1), full, rtol=1e-9, atol=1e-10)
        gen = model.generate(idx[:, :4], max_new_tokens=5, temperature=0)
        assert torch.equal(gen[:, 4:], model(gen)[:, 3:-1].argmax(-1))


def run_cfg(tmp: Path, ck: str, **kw) -> TrainingConfig:
    model = ModelConfig(vocab_size=256, max_seq_len=32, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=8,
                        chunk_size=16, ffn_dim=64, mixer="mamba3", mimo_rank=2)
    base = dict(data_path=str(byte_corpus(tmp / "data", 40_000, 4_000)), checkpoint_dir=str(tmp / ck), batch_size=4,
                gradient_accumulation_steps=1, max_steps=10, warmup_steps=2, lr=3e-3, save_every=4, log_every=1,
                eval_every=5, eval_batches=1, sample_tokens=0, keep_last=2, device="cpu")
    return TrainingConfig(model=model, **{**base, **kw})


def test_trainer_trains_resumes_and_exports(tmp_path):
    full = Pretrainer(run_cfg(tmp_path, "full"))
    out = full.train()
    assert out["step"] == 10 and out["losses"][-1] < out["losses"][0]
    cut = Pretrainer(run_cfg(tmp_path, "cut"))
    cut.train(until_step=6)                                                   # checkpoint at 4, steps 5-6 lost
    resumed = Pretrainer(run_cfg(tmp_path, "cut", resume="auto"))
    assert resumed.step == 4
    assert resumed.train()["losses"] == out["losses"][4:]                     # the same steps 5..10, bit for bit
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    # the export of the trained model round-trips: config (mixer, rank) and weights, and it decodes the same
    d = save_pretrained(full.model, tmp_path / "export")
    assert json.loads((d / "config.json").read_text())["mixer"] == "mamba3"
    back = from_pretrained(d).eval()
    assert (back.cfg.mixer, back.cfg.mimo_rank) == ("mamba3", 2)
    model = getattr(full.model, "_orig_mod", full.model).eval()
    idx = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(back(idx), model(idx), rtol=0, atol=0)
