"""Batched token-in/token-out sampling of chat episodes (Qwen3) with a Hugging Face causal LM.

All episodes advance turn by turn. Each turn, the active episodes are generated in chunks of
`generation_batch`: one prefill of each episode's whole context, left-padded with an attention mask
and explicit position ids (so a row's positions are 0.. as in the trainer's right-padded pass), then
one token per step through the KV cache (a fresh HF DynamicCache per chunk and turn; the turn's
prefill recomputes the context, which is cheap next to decoding and keeps the cache's rows simple).

Sampling is plain softmax(logits / temperature) by inverse CDF, no top-k/top-p, so the sampler's
distribution is the one the trainer differentiates; each sampled token's log-prob is read from that
step's log-softmax, and only the current step's logits are ever held ([B, V]; the prefill computes
the last position's logits only). A turn ends at <|im_end|> (a policy token) or after max_new_tokens
(then it is unterminated: the env sees None, a malformed call, and <|im_end|> is appended as a
non-policy token before the observation).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from bugfix_rl.gym.chat import chat_front_end
from bugfix_rl.policy.chat_template import ChatTokenPath, Transcript
from bugfix_rl.rollout.env_errors import step_or_fail
from bugfix_rl.rollout.trajectory import Trajectory


@dataclass
class Turn:
    """One generated turn: ids as sampled (with <|im_end|> when closed), their log-probs, closed or cut off."""

    ids: list[int]
    logps: list[float]
    closed: bool


def sample_next(logits: torch.Tensor, temperature: float, generator: torch.Generator):
    """Inverse-CDF sample from softmax(logits / temperature): ids [B], log-probs [B] (float32).

    The uniforms come from the (CPU) generator, so a run's draws do not depend on the device."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, V]
    cdf = logp.exp().cumsum(-1)
    u = torch.rand(logits.shape[0], 1, generator=generator).to(logits.device) * cdf[:, -1:]
    ids = torch.searchsorted(cdf, u.clamp_min(torch.finfo(torch.float32).tiny)).clamp_(max=logits.shape[-1] - 1)
    return ids.squeeze(1), logp.gather(1, ids).squeeze(1)


@torch.no_grad()
def generate_turns(lm, contexts: list[list[int]], max_new_tokens: int, end_id: int, pad_id: int,
                   temperature: float, generator: torch.Generator) -> list[Turn]:
    """Sample one turn for each context (ids so far), batched: left-padded prefill, then cached decoding."""
    device = next(lm.parameters()).device
    B, L = len(contexts), max(len(c) for c in contexts)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention = torch.zeros(B, L, dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, L - len(context):] = torch.tensor(context)
        attention[row, L - len(context):] = 1
    ids, attention = ids.to(device), attention.to(device)
    positions = (attention.cumsum(1) - 1).clamp_(min=0)  # [B, L]: each row's real tokens at 0, 1, ...
    out = lm(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache_kwarg = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"  # HF 5 / 4
    next_position = positions[:, -1:] + 1  # [B, 1]
    tokens, logps = [], []
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        token, logp = sample_next(out.logits[:, -1], temperature, generator)  # [B], [B]
        tokens.append(token)
        logps.append(logp)
        ended |= token == end_id
        if bool(ended.all()) or step + 1 == max_new_tokens:
            break
        attention = torch.cat([attention, torch.ones(B, 1, dtype=torch.long, device=device)], 1)
        out = lm(input_ids=token[:, None], attention_mask=attention, position_ids=next_position,
                 use_cache=True, **{cache_kwarg: _cache(out)})
        next_position = next_position + 1
    tokens, logps = torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist()  # [B, n] each
    turns = []
    for row_tokens, row_logps in zip(tokens, logps):
        n = row_tokens.index(end_id) + 1 if end_id in row_tokens else len(row_tokens)
        turns.append(Turn(row_tokens[:n], row_logps[:n], closed=end_id in row_tokens))
    return turns


def _cache(out):
    """The KV cache an HF forward returned (`cache` in transformers 5, `past_key_values` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@dataclass
class _Episode:
    env: object
    front_end: object
    transcript: Transcript


def sample_chat_episodes(lm, path: ChatTokenPath, envs: list, groups: list[int], temperature: float,
                         generator: torch.Generator, max_new_tokens: int, max_len: int,
                         generation_batch: int = 0) -> list[Trajectory]:
    """Run every env to its end with `lm` acting through its chat front-end; one Trajectory per env."""
    episodes = []
    for env in envs:
        front_end = chat_front_end(env)
        prompt = path.prompt_ids(front_end.system, front_end.user_message(env), front_end.tools)
        episodes.append(_Episode(env, front_end, Transcript(prompt)))
    pad_id = path.tokenizer.pad_token_id if path.tokenizer.pad_token_id is not None else path.end_of_turn_id
    while True:
        active = [e for e in episodes if not e.env.done]
        if not active:
            break
        size = generation_batch if generation_batch > 0 else len(active)
        for start in range(0, len(active), size):
            chunk = active[start:start + size]
            turns = generate_turns(lm, [e.transcript.ids for e in chunk], max_new_tokens, path.end_of_turn_id,
                                   pad_id, temperature, generator)
            for episode, turn in zip(chunk, turns):
                _advance(episode, turn, path, max_new_tokens, max_len)
    return [Trajectory(e.transcript.ids, e.transcript.policy_mask, e.transcript.sampler_logp, e.env.reward,
                       group, e.env.info) for e, group in zip(episodes, groups)]


def _advance(episode: _Episode, turn: Turn, path: ChatTokenPath, max_new_tokens: int, max_len: int) -> None:
    """Record the turn, let the env act on its text, append the observation (or end the episode)."""
    episode.transcript.add_sampled(turn.ids, turn.logps)
    text = path.decode(turn.ids[:-1]) if turn.closed else None
    responses = step_or_fail(episode.env, lambda turn: episode.front_end.step(episode.env, turn), text)
    if episode.env.done:
        return
    observation = path.observation_ids(responses, closed=turn.closed)
    if len(episode.transcript.ids) + len(observation) + max_new_tokens > max_len:
        episode.env.info.truncated = True  # the context is full: the episode ends here
        episode.env.done = True
        return
    episode.transcript.add_observation(observation)
