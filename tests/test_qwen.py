"""The Qwen3 path on a tiny random Qwen3 (CPU): token path vs chat template, sampler = trainer,
frugal micro-batched update = plain full-logits update, preflight and training through the CLI,
and the device script's --tiny mode."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest_qwen import QWEN_OVERRIDES, REPO, qwen_config, run_cli, tiny_qwen, tiny_qwen_dir  # noqa: F401
from repo_scripts import load_script

from bugfix_rl.algo import update as update_module
from bugfix_rl.algo.objective import AGGREGATIONS
from bugfix_rl.algo.update import minibatch_loss, policy_update, token_logprobs
from bugfix_rl.config import AlgoConfig
from bugfix_rl.gym.chat import CHAT_FRONT_ENDS, ToolsChat, edit_menu_words
from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.chat_template import TokenPathMismatch, Transcript, check_token_path
from bugfix_rl.policy.qwen3 import FullLogits
from bugfix_rl.present.dashboard import read_metrics
from bugfix_rl.rollout.sampler import sample_episodes
from bugfix_rl.types import collate


def edit_menu_episodes(policy, n_tasks: int = 2, per_task: int = 4, temperature: float = 1.0, seed: int = 0):
    envs = [EditMenuEnv(task, EditMenuConfig(rename=False)) for task in make_tasks("train")[:n_tasks]
            for _ in range(per_task)]
    groups = [i // per_task for i in range(len(envs))]
    return sample_episodes(policy, None, envs, groups, temperature, torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- (1) token path

def test_token_path_equals_the_chat_template_for_both_envs(tiny_qwen):
    policy, _ = tiny_qwen
    for front_end in CHAT_FRONT_ENDS.values():
        check_token_path(policy.path, front_end.tools)  # one and two tool results per turn


def test_a_retokenising_path_is_caught(tiny_qwen):
    policy, _ = tiny_qwen
    path = policy.path

    class Retokenising(Transcript):
        def add_sampled(self, ids, logps):
            ids = path.encode(path.decode(ids))  # text round trip: merges the split pieces back
            super().add_sampled(ids, [0.0] * len(ids))

    with pytest.raises(TokenPathMismatch, match="not kept as sampled"):
        check_token_path(path, ToolsChat.tools, Retokenising)


def test_observation_ids_that_miss_the_template_are_caught(tiny_qwen, monkeypatch):
    policy, _ = tiny_qwen
    path = policy.path
    rendered = type(path).observation_ids
    monkeypatch.setattr(path, "observation_ids", lambda responses, closed=True: rendered(path, responses, closed)[1:])
    with pytest.raises(TokenPathMismatch, match="chat template"):
        check_token_path(path, ToolsChat.tools)


def test_edit_menu_json_calls_map_to_gym_words():
    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    assert edit_menu_words(call % ("read", "{}")) == ["read"]
    assert edit_menu_words("I will edit. " + call % ("edit", '{"op": "fix_init"}')) == ["edit", "fix_init"]
    for malformed in (None, "no call", call % ("edit", '{"op": "nope"}'), call % ("read", '{"x": 1}'),
                      call % ("read", "{}") * 2, "<tool_call>{not json}</tool_call>", call % ("delete", "{}")):
        assert edit_menu_words(malformed) is None


def test_missing_model_is_one_line_error(tmp_path):
    result = run_cli("preflight", "policy=qwen3", f"policy.model={tmp_path / 'nowhere'}", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "not a local model directory" in result.stderr


# ---------------------------------------------------------------- sampler = trainer

@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_recomputes_the_sampler_logprobs(tiny_qwen, temperature):
    policy, tokenizer = tiny_qwen
    episodes = edit_menu_episodes(policy, n_tasks=3, per_task=2, temperature=temperature)
    assert len({len(t.ids) for t in episodes}) > 1  # rows of different lengths: left padding is exercised
    batch = collate(episodes, tokenizer.pad_id)
    with torch.no_grad():
        frugal = token_logprobs(policy, batch.ids, temperature, mask=batch.mask).logp
        full = torch.log_softmax(policy(batch.ids)[:, :-1] / temperature, -1).gather(-1, batch.ids[:, 1:, None])
    on = batch.mask > 0
    assert float((frugal - batch.old_logp).abs()[on].max()) < 1e-5
    assert float((full.squeeze(-1) - batch.old_logp).abs()[on].max()) < 1e-5
    assert all(policy.structural_policy_mask(t) == t.policy_mask for t in episodes)


def _episodes_in_chunks_of_3(policy, per_task: int):
    """edit_menu_episodes generated 3 episodes per batched generation (policy.generation_batch=3)."""
    chunked = copy.copy(policy.cfg)
    chunked.generation_batch = 3
    original, policy.cfg = policy.cfg, chunked
    try:
        return edit_menu_episodes(policy, per_task=per_task)
    finally:
        policy.cfg = original


def test_generation_in_chunks_keeps_the_token_path(tiny_qwen):
    policy, tokenizer = tiny_qwen
    episodes = _episodes_in_chunks_of_3(policy, per_task=3)
    batch = collate(episodes, tokenizer.pad_id)
    with torch.no_grad():
        logp = token_logprobs(policy, batch.ids, 1.0, mask=batch.mask).logp
    assert float((logp - batch.old_logp).abs()[batch.mask > 0].max()) < 1e-5


@pytest.mark.parametrize("compiled", [False, True], ids=["static", "static_compiled_packed_gqa"])
def test_static_cache_sampler_keeps_the_token_path(tiny_qwen, tiny_qwen_dir, compiled):
    """policy.generation_cache=static (and the compiled decode step with sdpa_packed_gqa; on CPU compile only
    traces it, fullgraph, so a graph break fails here): 4 episodes in chunks of 3 (padded to 4 rows) and 1,
    the same episodes as the DynamicCache path from the same generator, and the trainer recomputes the
    sampled log-probs. The compiled step's speed is a GPU matter (docs/PERFORMANCE.md), not tested here."""
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    policy, _ = tiny_qwen
    reference = _episodes_in_chunks_of_3(policy, per_task=2)
    overrides = {"policy.generation_batch": 3, "policy.generation_cache": "static"}
    if compiled:
        overrides.update({"policy.compile_decode": True, "policy.attn_implementation": "sdpa_packed_gqa"})
    cfg = qwen_config(tiny_qwen_dir, **overrides)
    tokenizer = build_tokenizer_for(cfg)
    static = build_policy(cfg.policy, tokenizer)
    episodes = edit_menu_episodes(static, per_task=2)
    decoder = static.static_decoder  # built by the sampling above
    assert decoder is not None and decoder.compiled == compiled
    assert 4 in {rows for rows, _ in decoder.caches}  # 3 episodes padded to 4 rows
    assert [t.ids for t in episodes] == [t.ids for t in reference]
    assert max(abs(a - b) for x, y in zip(episodes, reference) for a, b in zip(x.sampler_logp, y.sampler_logp)) < 1e-5
    batch = collate(episodes, tokenizer.pad_id)
    with torch.no_grad():
        logp = token_logprobs(static, batch.ids, 1.0, mask=batch.mask).logp
    assert float((logp - batch.old_logp).abs()[batch.mask > 0].max()) < 1e-5
    assert all(static.structural_policy_mask(t) == t.policy_mask for t in episodes)
    assert copy.deepcopy(static).static_decoder is None  # a copy builds its own buffers


def test_packed_gqa_attention_equals_repeated_kv_heads():
    """sdpa_packed_gqa on a one-token query (4 heads over 2 kv heads, a padding mask) equals plain attention
    with each kv head repeated for its query heads; longer queries go to HF's sdpa unchanged."""
    from transformers.integrations.sdpa_attention import repeat_kv

    from bugfix_rl.policy.qwen3 import sdpa_packed_gqa

    generator = torch.Generator().manual_seed(0)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    query = torch.randn(3, 4, 1, 8, generator=generator)
    key, value = torch.randn(3, 2, 10, 8, generator=generator), torch.randn(3, 2, 10, 8, generator=generator)
    mask = torch.ones(3, 1, 1, 10, dtype=torch.bool)
    mask[0, ..., :4] = mask[2, ..., 7:] = False
    out, _ = sdpa_packed_gqa(module, query, key, value, mask, scaling=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(query, repeat_kv(key, 2), repeat_kv(value, 2),
                                                                attn_mask=mask, scale=0.3).transpose(1, 2)
    assert out.shape == (3, 1, 4, 8) and torch.allclose(out, expected, atol=1e-6)
    long_query = torch.randn(3, 4, 5, 8, generator=generator)
    out, _ = sdpa_packed_gqa(module, long_query, key, value, None, scaling=0.3)
    assert out.shape == (3, 5, 4, 8)


def test_compile_decode_needs_the_static_cache():
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    cfg.policy.compile_decode = True
    with pytest.raises(ConfigError, match="generation_cache=static"):
        validate(cfg)
    cfg.policy.generation_cache = "static"
    validate(cfg)


# ---------------------------------------------------------------- (3) frugal update = plain update


class CaptureGradient:
    """An optimizer stand-in that records the gradient it is asked to apply."""

    def __init__(self, params):
        self.params, self.grads = list(params), []

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads.append(torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                                     for p in self.params]))


def test_frugal_micro_batched_update_gives_the_full_logits_gradient(tiny_qwen, monkeypatch):
    policy, tokenizer = tiny_qwen
    batch = collate(edit_menu_episodes(policy), tokenizer.pad_id)
    batch.advantages = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0])  # half the rows skip backward
    algo = AlgoConfig(minibatches=1, micro_batch_size=3, max_grad_norm=1e9)
    frugal = copy.deepcopy(policy)
    optimizer = CaptureGradient(frugal.lm.parameters())
    calls = []
    loss_fn = update_module.minibatch_loss

    def spy(model, mb, *args, **kwargs):
        calls.append((len(mb), torch.is_grad_enabled()))
        return loss_fn(model, mb, *args, **kwargs)

    monkeypatch.setattr(update_module, "minibatch_loss", spy)
    metrics = policy_update(frugal, optimizer, batch, algo, torch.Generator().manual_seed(0))
    assert sum(n for n, grad in calls if not grad) == 4  # zero-advantage rows: no-grad pass only
    assert metrics["logp_gap_p99"] < 1e-5 and metrics["logp_gap_mean"] <= metrics["logp_gap_p99"]

    plain = FullLogits(copy.deepcopy(policy.lm))
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    loss, _ = minibatch_loss(plain, batch, weights, algo)  # one pass, every row, [B, T, V] logits
    loss.backward()
    reference = torch.cat([p.grad.reshape(-1) for p in plain.lm.parameters()])
    difference = (optimizer.grads[0] - reference).abs().max() / reference.abs().max()
    assert reference.abs().max() > 0 and float(difference) < 1e-5


def test_skipping_zero_advantage_rows_leaves_the_optimizer_trajectory_unchanged(tiny_qwen, monkeypatch):
    """A minibatch whose rows are all skipped still takes its (zero-gradient) optimizer step, so Adam's
    momentum and step count evolve exactly as without the skip."""
    policy, tokenizer = tiny_qwen
    batch = collate(edit_menu_episodes(policy), tokenizer.pad_id)
    signal, silent = copy.copy(batch), copy.copy(batch)
    signal.advantages = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0])
    silent.advantages = torch.zeros(len(batch))
    algo = AlgoConfig(minibatches=2, micro_batch_size=2, lr=1e-3)
    final = []
    for skip in (True, False):
        if not skip:
            monkeypatch.setattr(update_module, "zero_advantage_split", lambda mb, algo: [(slice(None), True)])
        model = copy.deepcopy(policy)
        optimizer = model.make_optimizer(algo.lr)
        for step_batch in (signal, silent):
            policy_update(model, optimizer, step_batch, algo, torch.Generator().manual_seed(0))
        final.append(torch.cat([p.detach().reshape(-1) for p in model.lm.parameters()]))
    assert torch.equal(final[0], final[1])


def test_gradient_checkpointing_gives_the_same_gradient(tiny_qwen):
    policy, tokenizer = tiny_qwen
    batch = collate(edit_menu_episodes(policy, per_task=2), tokenizer.pad_id)
    checkpointed_cfg = copy.copy(policy.cfg)
    checkpointed_cfg.gradient_checkpointing = True
    gradients = []
    for model in (copy.deepcopy(policy), type(policy)(copy.deepcopy(policy.lm), tokenizer, checkpointed_cfg)):
        out = token_logprobs(model, batch.ids, 1.0, mask=batch.mask, with_entropy_grad=True)
        (out.logp.sum() + out.entropy.sum()).backward()
        gradients.append(torch.cat([p.grad.reshape(-1) for p in model.lm.parameters()]))
    assert torch.allclose(gradients[0], gradients[1], rtol=1e-5, atol=1e-7)


def test_policy_brings_adamw_without_weight_decay(tiny_qwen):
    policy, _ = tiny_qwen
    optimizer = policy.make_optimizer(1e-6)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.param_groups[0]["weight_decay"] == 0.0


# ---------------------------------------------------------------- (2) preflight and training via the CLI

@pytest.mark.parametrize("env", ["edit_menu", "tools"])
def test_preflight_passes_all_nine_invariants(tiny_qwen_dir, env, tmp_path):
    result = run_cli("preflight", *QWEN_OVERRIDES, f"policy.model={tiny_qwen_dir}", f"env={env}",
                     f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "all 11 checks hold" in result.stdout  # the ten and the canary check (scripted policies)


@pytest.mark.slow  # ~45 s; the tools chat path's token path and preflight run in the default suite
def test_train_two_steps_on_the_tools_env(tiny_qwen_dir, tmp_path):
    result = run_cli("train", "+exp=smoke", *QWEN_OVERRIDES, f"policy.model={tiny_qwen_dir}", "env=tools",
                     "preflight=false", "eval.test=false", "eval.n_val=1", "eval.ckpt_every=2",
                     f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    for key in ("malformed", "failed", "failed_not_found", "calls_Read", "policy_tokens", "logp_gap_mean",
                "logp_gap_p99"):
        assert key in rows[0], key
    assert rows[0]["logp_gap_p99"] < 1e-4
    assert (tmp_path / "checkpoints" / "step_002.safetensors").is_file()


# ---------------------------------------------------------------- the device script, CPU size

def _device_script(*args: str) -> dict:
    """scripts/qwen_device_run.py's main(args) in this process (it sets 2 threads for --tiny: restored), and
    the JSON it wrote."""
    threads = torch.get_num_threads()
    try:
        load_script("qwen_device_run").main(list(args))
    finally:
        torch.set_num_threads(threads)
    return json.loads(Path(args[args.index("--out") + 1]).read_text())


def test_device_script_starts_as_a_script():
    """As the GPU session starts it (`python scripts/qwen_device_run.py ...`): its own imports (bugfix_rl
    before torch) and its __main__ block; the runs below call its main() in this process."""
    result = subprocess.run([sys.executable, "scripts/qwen_device_run.py", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "--lab" in result.stdout and "--tiny" in result.stdout, result.stderr[-2000:]


def test_device_script_runs_tiny_on_cpu(tmp_path):
    report = _device_script("--tiny", "--out", str(tmp_path / "result.json"))
    assert report["weights"].startswith("RANDOM weights")
    assert [env["env"] for env in report["envs"]] == ["edit_menu", "tools"]
    for env in report["envs"]:
        step = env["steps"][0]
        assert step["generation_s"] > 0 and step["update_s"] > 0 and step["logp_gap_p99"] < 1e-4
        assert "peak_gpu_gb" in env


def test_device_script_runs_the_tools_lab_tiny_on_cpu(tmp_path):
    """--lab tools --tiny: the tools-lab preset's code path (bf16, one generation batch per turn, the static
    cache, the compiled decode step traced on CPU, the packed-GQA attention, then the plain sampler) on the
    tiny Qwen3. Its timings mean nothing on a CPU; the fields are what the GPU run reports."""
    report = _device_script("--lab", "tools", "--tiny", "--steps", "2", "--out", str(tmp_path / "lab.json"))
    assert report["lab"] == "tools" and report["dtype"] == "bfloat16" and report["gradient_checkpointing"]
    fast, eager = report["envs"]
    assert fast["env"] == eager["env"] == "tools" and fast["max_new_tokens"] == 12
    assert fast["sampler"] == {"label": "fast", "generation_batch": 64, "generation_cache": "static",
                               "compile_decode": True, "attn_implementation": "sdpa_packed_gqa"}
    assert "compile_error" not in fast
    assert eager["sampler"]["generation_cache"] == "dynamic" and not eager["sampler"]["compile_decode"]
    assert len(fast["steps"]) == 2 and len(eager["steps"]) == 1
    for step in fast["steps"] + eager["steps"]:
        assert step["generation_s"] > 0 and step["update_s"] > 0 and step["sampled_positions"] > 0
        assert step["logp_gap_p99"] < 1e-2  # bf16
    summary = report["summary"]
    assert summary["fast"]["steps"] == 2 and summary["eager"]["steps"] == 1 and "steady_step_s" in fast
    assert summary["book_s_per_step"] == pytest.approx(66.7, abs=0.1) and summary["aim_s_per_step"] == 15.0
    assert "peak_gpu_gb" in fast and summary["eager_over_fast_generation"] > 0


# ---------------------------------------------------------------- (5) on a CUDA device (make test-gpu)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_chat_path_on_cuda_matches_the_cpu(tiny_qwen):
    """The tiny Qwen3 moved to the GPU: its sampled episodes keep the token path, the trainer's log-probs
    equal the sampler's there, and equal the CPU's for the same ids; one update step runs."""
    policy, tokenizer = tiny_qwen
    on_cpu = copy.deepcopy(policy)
    policy.lm.to("cuda")
    episodes = edit_menu_episodes(policy, n_tasks=2, per_task=2)
    batch = collate(episodes, tokenizer.pad_id)
    on = batch.mask > 0
    with torch.no_grad():
        gpu = token_logprobs(policy, batch.ids, 1.0, mask=batch.mask).logp
        cpu = token_logprobs(on_cpu, batch.ids, 1.0, mask=batch.mask).logp
    assert float((gpu - batch.old_logp).abs()[on].max()) < 1e-4
    assert float((gpu - cpu).abs()[on].max()) < 1e-3
    batch.advantages = torch.linspace(-1, 1, len(batch))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4, weight_decay=0.0)
    metrics = policy_update(policy, optimizer, batch, AlgoConfig(minibatches=1), torch.Generator().manual_seed(0))
    assert metrics["nonfinite_skips"] == 0.0 and metrics["grad_norm"] > 0
