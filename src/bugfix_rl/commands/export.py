"""`bugfix-rl export ckpt=<file|run dir> out=<dir>`: a trained policy in the Hugging Face layout.

A run dir exports its chosen checkpoint (eval.json's chosen_step, as `eval ckpt=<run dir>` picks it).

- Qwen3 (`policy=qwen3`): the model's and the tokenizer's `save_pretrained`, so
  `AutoModelForCausalLM.from_pretrained(out)` and `AutoTokenizer.from_pretrained(out)` load it.
- TinyAgent: `model.safetensors` (its state dict, no pickle), `config.json` (the architecture, the
  vocabulary size and everything the forward reads: the out-of-vocabulary slots and their logit, the
  copy head's switches, the identifier ids), `vocab.json` (word -> id) and `tokenizer_config.json`
  (whitespace words, the special tokens). Without a copy head (the edit menu's policy) the forward is
  a plain pre-norm transformer with tied embeddings that torch alone computes from these files:
  tests/test_export.py does it in a self-contained function, without this package. With a copy head
  (env=tools) the weights and switches are all there, but the pointer-generator's mixture is
  policy/copy_head.py's code: loading it takes `bugfix_rl.policy.tiny.TinyAgent` (not tested here).

Nothing is written until the inputs are checked (inputs.check_export: the checkpoint, the model a
Qwen3 checkpoint was trained from, an `out` that is absent or empty and writable); the folder is
written as a temporary sibling and renamed to `out` at the end, so a failure leaves no half export.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

SLOT_LOGIT_KEY = "slot_logit"
FORMAT = "bugfix_rl_tiny_agent"  # config.json's model_type for TinyAgent


def export_command(cfg) -> Path:
    from bugfix_rl.commands.inputs import checkpoint_of
    from bugfix_rl.evaluate.checkpoint_eval import load_policy

    ckpt = checkpoint_of(cfg.ckpt)
    loaded = load_policy(ckpt)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.export-"))
    try:
        if loaded.cfg.policy.name == "tiny":
            write_tiny_agent(tmp, loaded)
        else:
            write_chat_model(tmp, loaded)
        if out.is_dir():
            out.rmdir()  # empty (inputs.check_export): the rename takes its place
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"exported {ckpt} (policy={loaded.cfg.policy.name}, env={loaded.cfg.env.name}, step {loaded.step})"
          f" to {out}: {files}")
    return out


def tiny_agent_config(loaded) -> dict:
    """config.json of an exported TinyAgent: what a forward needs, and where the weights came from."""
    from bugfix_rl.policy.tiny import COPY_FIELDS, SLOT_LOGIT
    from bugfix_rl.policy.tokenizer import edit_marker_ids, identifier_ids

    model, tokenizer, policy = loaded.model, loaded.tokenizer, loaded.cfg.policy
    arch = model.cfg
    config = {
        "architectures": ["TinyAgent"], "model_type": FORMAT,
        "vocab_size": len(tokenizer.words),  # words with an embedding; ids vocab_size.. are the slots
        "oov_slots": tokenizer.oov_slots, SLOT_LOGIT_KEY: SLOT_LOGIT,
        "d_model": arch.d_model, "n_layers": arch.n_layers, "n_heads": arch.n_heads, "d_ff": arch.d_ff,
        "max_len": arch.max_len, "layer_norm_eps": 1e-5, "activation": "gelu", "tie_word_embeddings": True,
        **{name: getattr(arch, name) for name in COPY_FIELDS},
        "identifier_ids": identifier_ids(tokenizer) if arch.shared_identifier_embedding else None,
        "edit_markers": list(edit_marker_ids(tokenizer)) if arch.reads_edit_markers else None,
        "pad_token_id": tokenizer.pad_id, "bos_token_id": tokenizer.bos_id,
        "end_of_action_token_id": tokenizer.end_of_action_id,
        "end_of_observation_token_id": tokenizer.end_of_observation_id,
        "bugfix_rl": {"checkpoint": str(loaded.path), "step": loaded.step, "env": loaded.cfg.env.name,
                      "experiment": loaded.cfg.experiment, "arm": loaded.cfg.arm, "seed": loaded.cfg.seed,
                      "policy_init": policy.init},
    }
    return config


def write_tiny_agent(folder: Path, loaded) -> None:
    from safetensors.torch import save_file

    from bugfix_rl.policy.tokenizer import SPECIALS

    tokenizer = loaded.tokenizer
    state = {key: value.detach().contiguous().cpu() for key, value in loaded.model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(tiny_agent_config(loaded), indent=1) + "\n")
    (folder / "vocab.json").write_text(json.dumps({word: i for i, word in enumerate(tokenizer.words)}, indent=0) + "\n")
    pad, bos, end_of_action, end_of_observation = SPECIALS
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "word level: text.split() (whitespace), each word its vocab.json id",
        "out_of_vocabulary": f"an episode's k-th distinct word outside vocab.json takes id vocab_size + k "
                             f"(k < {tokenizer.oov_slots}), kept for the whole episode",
        "pad_token": pad, "bos_token": bos, "end_of_action_token": end_of_action,
        "end_of_observation_token": end_of_observation}, indent=1) + "\n")


def write_chat_model(folder: Path, loaded) -> None:
    """A chat model (Qwen3): its own save_pretrained, weights and tokenizer (chat template included)."""
    loaded.model.lm.save_pretrained(str(folder))
    loaded.tokenizer.hf.save_pretrained(str(folder))
