"""Batched token-in/token-out sampling of whole episodes with a KV cache.

All episodes of a step advance together. In each forward step a row feeds what the model has not
seen yet: its last sampled token, or (once an action ended) that token plus the env's observation
and the end-of-observation token. Sampled ids are kept exactly as sampled, never re-encoded; each
sampled token's log-prob under the sampling distribution (temperature-scaled logits) is recorded.
Each episode has its own `EpisodeWords`, so a word outside the vocabulary keeps one slot id across its
observations and the agent's copies of it decode to that word. An env that asks for it
(`env.guide_old_string`) has its Edits' old_string guided (policy/guided_edits.py); the allowed ids of
each guided position are kept in the episode for the trainer.

That loop samples the word tokenizer's policies (TinyAgent). `sample_episodes` picks a policy's sampler
by its kind (EPISODE_SAMPLERS): a chat model's is rollout/chat_sampler.py.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from bugfix_rl.policy.guided_edits import allowed_tensor, episode_guide, hold_to_allowed
from bugfix_rl.policy.tokenizer import EpisodeWords, OutOfSlots, Tokenizer
from bugfix_rl.registry import Registry
from bugfix_rl.rollout.chat_sampler import sample_policy_episodes
from bugfix_rl.rollout.env_errors import step_or_fail
from bugfix_rl.types import Trajectory


class Env(Protocol):
    """What the sampler needs from an environment (edit menu and tools envs both provide it)."""

    done: bool
    info: object
    max_action_tokens: int

    def reset(self) -> str: ...

    def step(self, words: list[str] | None) -> str: ...

    @property
    def reward(self) -> float: ...


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator):
    """Inverse-CDF sampling from softmax(logits / temperature): ids [B], log-probs [B]."""
    logp = torch.log_softmax(logits / temperature, dim=-1)  # [B, V]
    cdf = logp.exp().cumsum(-1)
    u = torch.rand(logits.shape[0], 1, generator=generator) * cdf[:, -1:]
    u = u.clamp_min(torch.finfo(cdf.dtype).tiny)  # a draw of exactly 0 would pick a leading zero-probability token
    ids = torch.searchsorted(cdf, u).clamp_(max=logits.shape[-1] - 1)  # [B, 1]
    return ids.squeeze(1), logp.gather(1, ids).squeeze(1)


def policy_kind(model) -> str:
    """Which sampler and oracle play a policy takes: its `kind` ("chat": policy/qwen3.QwenPolicy); TinyAgent
    and any other model over the word tokenizer have none: "word"."""
    return getattr(model, "kind", "word")


@torch.no_grad()
def sample_episodes(model, tokenizer, envs: list[Env], groups: list[int], temperature: float,
                    generator: torch.Generator) -> list[Trajectory]:
    """Run every env to its end with `model` acting; one Trajectory per env, in order, by the sampler of
    the model's kind (EPISODE_SAMPLERS)."""
    return EPISODE_SAMPLERS[policy_kind(model)](model, tokenizer, envs, groups, temperature, generator)


@torch.no_grad()
def sample_word_episodes(model, tokenizer: Tokenizer, envs: list[Env], groups: list[int], temperature: float,
                         generator: torch.Generator) -> list[Trajectory]:
    """The word tokenizer's sampler (TinyAgent): the batched KV-cache loop this module's docstring describes."""
    B = len(envs)
    eoa, eoo = tokenizer.end_of_action_id, tokenizer.end_of_observation_id
    max_len = model.cfg.max_len
    vocabularies = [tokenizer.episode() for _ in envs]
    ids = [[tokenizer.bos_id] + vocabulary.encode(env.reset()) + [eoo] for env, vocabulary in zip(envs, vocabularies)]
    policy_mask = [[False] * len(row) for row in ids]
    sampler_logp = [[0.0] * len(row) for row in ids]
    pending = [list(row) for row in ids]  # tokens each row feeds next
    action = [[] for _ in range(B)]
    active = [True] * B
    guides = [episode_guide(env, tokenizer, vocabulary) for env, vocabulary in zip(envs, vocabularies)]
    guided = [[] for _ in range(B)]  # (position, allowed ids) of each guided token
    cache = model.new_cache(B)
    while any(active):
        lengths = [len(p) if a else 0 for p, a in zip(pending, active)]
        width = max(lengths)
        # one tensor from padded lists: per-row tensor writes cost more than the forward at this size
        feed = torch.tensor([(p if a else []) + [0] * (width - n) for p, a, n in zip(pending, active, lengths)])
        n_new = torch.tensor(lengths)
        logits = model.forward_step(feed, n_new, cache)
        allowed = [_allowed_next(guide, row) if a else None for guide, row, a in zip(guides, ids, active)]
        if any(allowed):
            logits = hold_to_allowed(logits, allowed_tensor(allowed))
        tokens, logps = sample_token(logits, temperature, generator)
        for b, (token, logp) in enumerate(zip(tokens.tolist(), logps.tolist())):
            if not active[b]:
                continue
            env = envs[b]
            if allowed[b]:
                guided[b].append((len(ids[b]), allowed[b]))
            ids[b].append(token)
            policy_mask[b].append(True)
            sampler_logp[b].append(logp)
            pending[b] = [token]
            action[b].append(token)
            ended = token == eoa
            if not ended and len(action[b]) < env.max_action_tokens:
                continue
            words = vocabularies[b].words_of(action[b][:-1]) if ended else None
            action[b] = []
            observation = step_or_fail(env, env.step, words)  # an env that raises ends this episode only
            if env.done:
                active[b] = False
                continue
            obs_ids = _encode_or_none(vocabularies[b], observation)
            if obs_ids is None or len(ids[b]) + len(obs_ids) + 1 + env.max_action_tokens > max_len:
                env.info.truncated = True  # the context is full: the episode ends unsubmitted
                env.done = True
                active[b] = False
                continue
            obs_ids.append(eoo)
            ids[b].extend(obs_ids)
            policy_mask[b].extend([False] * len(obs_ids))
            sampler_logp[b].extend([0.0] * len(obs_ids))
            pending[b].extend(obs_ids)
    return [Trajectory(ids[b], policy_mask[b], sampler_logp[b], envs[b].reward, groups[b], envs[b].info,
                       oov_words=tuple(vocabularies[b].oov_words), guided=tuple(guided[b])) for b in range(B)]


def _allowed_next(guide, row: list[int]) -> tuple[int, ...] | None:
    """What a row's guide allows next after its context so far (None: no guide, or not guided here)."""
    if guide is None:
        return None
    guide.feed(row)
    return guide.allowed()


def _encode_or_none(vocabulary: EpisodeWords, text: str) -> list[int] | None:
    """The ids of text, or None when the episode's slots run out (with a slot per context position,
    only for an episode that cannot fit its context: it ends as the context-full one does)."""
    try:
        return vocabulary.encode(text)
    except OutOfSlots:
        return None


# policy kind (policy_kind) -> (model, tokenizer, envs, groups, temperature, generator) -> trajectories
EPISODE_SAMPLERS = Registry("policy kind", {"word": sample_word_episodes, "chat": sample_policy_episodes})


def scripted_episode(act: Callable[[str], list[str]], env: Env, tokenizer: Tokenizer,
                     group: int = 0) -> Trajectory:
    """Roll out a scripted policy (observation text -> action words) as a token-level Trajectory.

    The action tokens are marked as policy tokens (log-prob 0): these trajectories are demonstrations.
    An episode whose slots run out ends there, as the sampler ends it (context full).
    """
    eoa, eoo = tokenizer.end_of_action_id, tokenizer.end_of_observation_id
    vocabulary = tokenizer.episode()
    ids = [tokenizer.bos_id] + vocabulary.encode(env.reset()) + [eoo]
    observation = vocabulary.decode(ids[1:-1])
    mask = [False] * len(ids)
    while not env.done:
        words = act(observation)
        action_ids = _encode_or_none(vocabulary, " ".join(words))
        if action_ids is None:
            env.info.truncated = env.done = True
            break
        ids.extend(action_ids + [eoa])
        mask.extend([True] * (len(action_ids) + 1))
        observation = env.step(words)
        if env.done:
            break
        obs_ids = _encode_or_none(vocabulary, observation)
        if obs_ids is None:
            env.info.truncated = env.done = True
            break
        ids.extend(obs_ids + [eoo])
        mask.extend([False] * (len(obs_ids) + 1))
    return Trajectory(ids, mask, [0.0] * len(ids), env.reward, group, env.info,
                      oov_words=tuple(vocabulary.oov_words))
