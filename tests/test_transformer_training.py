"""Tests of covbook.transformer.training: training lowers the loss and resumes from checkpoints, the checkpoint key,
damaged checkpoints, window losses, divergence and bad input."""

from __future__ import annotations

import pytest
import torch

from covbook.transformer import (
    CausalTransformer,
    CharTokenizer,
    checkpoint_fingerprint,
    evaluate_loss,
    load_checkpoint,
    python_reference_text,
    train_language_model,
    window_losses,
)


def _tiny(seed: int = 0) -> tuple[CausalTransformer, torch.Tensor]:
    text = python_reference_text(max_chars=6000)
    tok = CharTokenizer(text)
    model = CausalTransformer(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2, mlp=True,
                              layer_norm=True, dtype=torch.float32, seed=seed)
    return model, tok.encode(text)


def test_training_lowers_the_loss_and_resumes_deterministically(tmp_path, monkeypatch):
    kw = {"steps": 12, "batch_size": 8, "seq_len": 16, "lr": 2e-2, "seed": 0, "eval_every": 4,
          "checkpoint_every": 4}
    model, tokens = _tiny()
    val = tokens[len(tokens) - int(0.1 * len(tokens)):]
    before = evaluate_loss(model, val, 16)
    res = train_language_model(model, tokens, **kw)
    assert res.final_val_loss < before - 0.5
    assert len(res.train_loss) == 12 and res.val_steps == [4, 8, 12]
    # interrupted after step 9 (an exception inside step 10), then resumed from the step-8 checkpoint
    ck = tmp_path / "ck.pt"
    calls = {"n": 0}
    real_clip = torch.nn.utils.clip_grad_norm_

    def flaky_clip(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return real_clip(*args, **kwargs)

    m1, _ = _tiny()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", flaky_clip)
    with pytest.raises(KeyboardInterrupt):
        train_language_model(m1, tokens, **{**kw, "checkpoint": ck})
    monkeypatch.undo()
    m1, _ = _tiny()
    part = train_language_model(m1, tokens, **{**kw, "checkpoint": ck})
    assert part.resumed_from == 8
    m2, _ = _tiny()
    again = train_language_model(m2, tokens, **{**kw, "checkpoint": ck})  # finished: just loads
    assert again.train_loss == part.train_loss == res.train_loss
    for p, q in zip(m2.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="another model"):
        train_language_model(_tiny()[0], tokens, **{**kw, "lr": 3e-2, "checkpoint": ck})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_model_on_cuda_resumes_from_its_checkpoint(tmp_path):
    # found on an H200: the checkpoint is loaded onto the model's device, and the CPU generator's state with it,
    # which torch.Generator.set_state refused ("RNG state must be a torch.ByteTensor")
    kw = {"steps": 8, "batch_size": 4, "seq_len": 16, "lr": 2e-2, "seed": 0, "eval_every": 4, "checkpoint_every": 4}
    ck = tmp_path / "ck.pt"
    model, tokens = _tiny()
    done = train_language_model(model.to("cuda"), tokens, **{**kw, "checkpoint": ck})
    again = train_language_model(_tiny()[0].to("cuda"), tokens, **{**kw, "checkpoint": ck})  # loads, trains nothing
    assert again.train_loss == done.train_loss


def test_training_errors():
    model, tokens = _tiny()
    with pytest.raises(ValueError, match="lr"):
        train_language_model(model, tokens, steps=1, batch_size=2, seq_len=8, lr=0.0, seed=0)
    with pytest.raises(ValueError, match="too few tokens"):
        train_language_model(model, tokens[:20], steps=1, batch_size=2, seq_len=8, lr=1e-3, seed=0)
    with pytest.raises(ValueError, match="tokens must lie"):
        train_language_model(model, tokens + 1000, steps=1, batch_size=2, seq_len=8, lr=1e-3, seed=0)


def test_checkpoint_fingerprint_and_damaged_checkpoints(tmp_path):
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0, dtype=torch.float32)
    toks = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(0))
    kw = dict(steps=4, batch_size=2, seq_len=8, lr=1e-3, seed=0)
    fp = checkpoint_fingerprint(m, toks, **kw)
    assert fp == checkpoint_fingerprint(m, toks, **kw, grad_clip=1.0)  # the default, spelled out
    assert fp != checkpoint_fingerprint(m, toks, **kw, grad_clip=0.5)
    bad = tmp_path / "garbage.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="damaged"):
        load_checkpoint(bad)
    with pytest.raises(ValueError, match="damaged"):
        train_language_model(m, toks, **kw, checkpoint=bad)
    good = tmp_path / "good.pt"
    train_language_model(m, toks, **kw, checkpoint=good)
    assert load_checkpoint(good, fingerprint=fp)["step"] == 4
    with pytest.raises(ValueError, match="another model"):
        load_checkpoint(good, fingerprint="0" * 16)


def test_window_losses_average_to_evaluate_loss():
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0)
    toks = torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(1))
    wl = window_losses(m, toks, 10, max_windows=7, batch_size=3)
    assert wl.shape == (7,)
    assert float(wl.mean()) == pytest.approx(evaluate_loss(m, toks, 10, max_windows=7), rel=1e-12)


def test_divergent_training_names_the_step_and_the_learning_rate():
    m = CausalTransformer(vocab_size=5, d_model=8, n_layers=1, seed=0, dtype=torch.float32)
    toks = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="diverged at step .* lower lr"):
        train_language_model(m, toks, steps=20, batch_size=2, seq_len=8, lr=1e6, seed=0, grad_clip=1e9)


def test_on_eval_sees_each_evaluation_and_can_stop_training(tmp_path):
    kw = {"steps": 12, "batch_size": 8, "seq_len": 16, "lr": 2e-2, "seed": 0, "eval_every": 4}
    seen = []
    model, tokens = _tiny()
    full = train_language_model(model, tokens, **kw, on_eval=lambda step, loss, m: seen.append((step, loss)))
    assert seen == list(zip(full.val_steps, full.val_loss))  # after each evaluation, with its loss
    # returning True stops after that evaluation: the same run so far, saved at that step
    model, tokens = _tiny()
    ck = tmp_path / "stop.pt"
    part = train_language_model(model, tokens, **kw, checkpoint=ck, on_eval=lambda step, loss, m: step == 8)
    assert part.val_steps == [4, 8] and part.val_loss == full.val_loss[:2] and len(part.train_loss) == 8
    assert load_checkpoint(ck)["step"] == 8
