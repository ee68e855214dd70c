"""`bugfix-rl export` (issue 38): a trained policy in the Hugging Face layout.

TinyAgent: the exported folder is computed by `standalone_logits` below, which reads it with json,
torch and safetensors only (no bugfix_rl code), and gives the logits the trained policy gives. Qwen3:
`AutoModelForCausalLM.from_pretrained(out)` loads the checkpoint's weights (not the base model's).
Bad input: one line, exit 2, nothing written.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from bugfix_rl import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest_qwen, as the Qwen tests import it
from conftest_qwen import qwen_config, tiny_qwen_dir  # noqa: E402,F401  (a fixture)

SMALL = ["+exp=smoke", "steps=1", "threads=1", "eval.n_val=2", "eval.n_test=2", "logger.console=false",
         "preflight=false"]


def standalone_logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    """An exported TinyAgent (without a copy head) from its files alone: ids [B, T] -> logits [B, T, V]."""
    import torch.nn.functional as F
    from safetensors.torch import load_file

    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "bugfix_rl_tiny_agent" and not cfg["copy_head"]
    w = load_file(str(folder / "model.safetensors"))
    C, H, words = cfg["d_model"], cfg["n_heads"], cfg["vocab_size"]
    B, T = ids.shape

    def norm(x, name):
        return F.layer_norm(x, (C,), w[f"{name}.weight"], w[f"{name}.bias"], cfg["layer_norm_eps"])

    def linear(x, name):
        return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

    x = w["token_embedding.weight"][ids.clamp(max=words - 1)]
    if cfg["shared_identifier_embedding"]:  # operand names and slots enter through one vector
        shared = torch.zeros(words + cfg["oov_slots"], dtype=torch.bool)
        shared[cfg["identifier_ids"]] = True
        shared[words:] = True
        x = torch.where(shared[ids][..., None], w["identifier_embedding"], x)
    else:  # an out-of-vocabulary slot enters as zeros
        x = x.masked_fill((ids >= words)[..., None], 0.0)
    x = x + w["position_embedding.weight"][:T]
    for layer in range(cfg["n_layers"]):
        block = f"blocks.{layer}"
        q, k, v = (t.unflatten(-1, (H, C // H)).transpose(1, 2)
                   for t in linear(norm(x, f"{block}.ln1"), f"{block}.qkv").split(C, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + linear(attended, f"{block}.proj")
        x = x + linear(F.gelu(linear(norm(x, f"{block}.ln2"), f"{block}.mlp.0")), f"{block}.mlp.2")
    logits = norm(x, "ln_f") @ w["token_embedding.weight"].T  # tied output head
    slots = logits.new_full((B, T, cfg["oov_slots"]), cfg["slot_logit"])  # no probability for a slot
    return torch.cat([logits, slots], -1)


def encode(folder: Path, text: str) -> list[int]:
    """vocab.json's word level encoding (one episode: new words take slots in order)."""
    vocab = json.loads((folder / "vocab.json").read_text())
    slots: dict[str, int] = {}
    return [vocab[word] if word in vocab else slots.setdefault(word, len(vocab) + len(slots)) for word in text.split()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("export") / "run"
    torch.set_num_threads(1)
    cli.main(["train", *SMALL, f"hydra.run.dir={run_dir}"])
    return run_dir


def test_a_run_dir_exports_its_chosen_tiny_agent_which_loads_without_this_package(tiny_run, tmp_path, capsys):
    from bugfix_rl.evaluate.checkpoint_eval import load_policy
    from bugfix_rl.commands.inputs import checkpoint_of

    out = tmp_path / "hf"
    cli.main(["export", f"ckpt={tiny_run}", f"out={out}"])
    chosen = checkpoint_of(str(tiny_run))
    assert f"exported {chosen}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer_config.json",
                                                     "vocab.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the temporary folder was renamed
    config = json.loads((out / "config.json").read_text())
    loaded = load_policy(chosen)
    assert config["bugfix_rl"]["step"] == json.loads((tiny_run / "eval.json").read_text())["chosen_step"]
    assert config["vocab_size"] == len(loaded.tokenizer.words) and config["oov_slots"] == loaded.tokenizer.oov_slots
    text = "<bos> issue : returns wrong results read def frobnicate ( a , b ) : <eoo>"  # `frobnicate`: a slot
    ids = torch.tensor([encode(out, text)])
    assert ids.tolist()[0] == loaded.tokenizer.encode(text)
    with torch.no_grad():
        expected = loaded.model(ids)
    assert torch.allclose(standalone_logits(out, ids), expected, atol=1e-5)
    step = config["bugfix_rl"]["step"]
    other = load_policy(str(tiny_run / "checkpoints" / f"step_{1 - step:03d}.safetensors")).model  # not the chosen
    with torch.no_grad():
        assert not torch.allclose(other(ids), expected, atol=1e-5)


def test_a_qwen3_checkpoint_exports_with_save_pretrained(tiny_qwen_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bugfix_rl.checkpoint import model_tensors, save_checkpoint
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    torch.set_num_threads(1)
    cfg = qwen_config(tiny_qwen_dir)
    tokenizer = build_tokenizer_for(cfg)
    policy = build_policy(cfg.policy, tokenizer)
    with torch.no_grad():  # a "trained" checkpoint: its weights are not the base model's
        policy.lm.get_input_embeddings().weight.mul_(1.5)
    ckpt = save_checkpoint(tmp_path / "step_001.safetensors", model_tensors(policy),
                           {"kind": "policy", "step": 1, "config": dataclasses.asdict(cfg)})
    out = tmp_path / "hf"
    out.mkdir()  # an empty folder is fine
    cli.main(["export", f"ckpt={ckpt}", f"out={out}"])
    assert "policy=qwen3" in capsys.readouterr().out
    exported = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert hf_tokenizer.chat_template == tokenizer.hf.chat_template
    ids = torch.tensor([hf_tokenizer("def f(a, b): return a")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(exported(input_ids=ids).logits.float(), policy.eval()(ids), atol=1e-4)
        base = AutoModelForCausalLM.from_pretrained(str(tiny_qwen_dir)).eval()
        assert not torch.allclose(base(input_ids=ids).logits.float(), policy(ids), atol=1e-4)


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_bad_export_inputs_are_one_line_and_write_nothing(tiny_run, tmp_path, capsys):
    before = set(tmp_path.iterdir())
    assert "not found" in _refused(capsys, ["export", f"ckpt={tmp_path / 'nope.safetensors'}", f"out={tmp_path / 'a'}"])
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert "not an empty folder" in _refused(capsys, ["export", f"ckpt={tiny_run}", f"out={full}"])
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    assert "without eval.json" in _refused(capsys, ["export", f"ckpt={unfinished}", f"out={tmp_path / 'b'}"])
    assert "out" in _refused(capsys, ["export", f"ckpt={tiny_run}"])  # out= is required
    assert set(tmp_path.iterdir()) == before | {full, unfinished}
