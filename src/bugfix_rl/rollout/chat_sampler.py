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

A faster decode, off by default (`policy.generation_cache=static`, `policy.compile_decode`): a
`StaticDecoder` keeps preallocated key/value buffers (HF `StaticCache` layers viewed into one buffer
per batch size) so every decode step has the same shapes, pads the batch to a power of two with
copies of a real row (their outputs are dropped; the generator draws for the real rows only, so the
draws are those of the dynamic path), and can `torch.compile` the one-token step (on CUDA
mode="reduce-overhead", i.e. CUDA graphs; on CPU backend="eager", which only traces it, so a graph
break fails there too). The sampled ids and their log-probs are read exactly as above; the tests
check the trainer recomputes them on CPU. The compiled step has not run on a GPU yet.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from bugfix_rl.gym.chat import chat_front_end
from bugfix_rl.policy.chat_template import ChatTokenPath, Transcript
from bugfix_rl.rollout.env_errors import step_or_fail
from bugfix_rl.types import Trajectory


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


GENERATION_CACHES = ("dynamic", "static")


class StaticDecoder:
    """Fixed-shape decoding for one causal LM: key/value buffers that outlive a turn, and the decode step
    (compiled or not).

    One buffer pair per layer and padded batch size, [rows, kv heads, length, head dim], grown (never
    shrunk) to the longest cache asked for; a turn's cache is an HF StaticCache whose layers are views of
    the first `length` slots, `length` being prefill + max_new_tokens rounded up to `bucket`. A view per
    (rows, length) is kept, so the same shapes reuse the same tensors (what CUDA graphs replay from).
    Slots past a row's tokens hold stale values that the causal mask never lets a query see."""

    def __init__(self, lm, compile_step: bool = False, bucket: int = 256):
        if bucket < 1:
            raise ValueError(f"static cache bucket must be >= 1, got {bucket}")
        self.lm, self.bucket, self.compiled = lm, bucket, compile_step
        self.buffers: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self.caches: dict[tuple[int, int], object] = {}
        self.on_cuda = next(lm.parameters()).device.type == "cuda"
        if not compile_step:
            self.step = lm
        elif self.on_cuda:  # inductor kernels replayed as CUDA graphs: one launch per decode step
            self.step = torch.compile(lm, mode="reduce-overhead", fullgraph=True)
        else:  # CPU: trace only (no speed-up), so the compiled code path and its fullgraph check still run
            self.step = torch.compile(lm, backend="eager", fullgraph=True)

    @staticmethod
    def rows(batch: int) -> int:
        """Rows of the padded batch: the next power of two (few shapes, at most 2x the rows)."""
        return 1 << max(0, batch - 1).bit_length()

    def length(self, needed: int) -> int:
        return -(-needed // self.bucket) * self.bucket

    def cache(self, rows: int, length: int):
        """The StaticCache for this shape, emptied (its stale slots stay behind the causal mask)."""
        key = (rows, length)
        cache = self.caches.get(key)
        if cache is None:
            cache = self._new_cache(rows, length)
            self.caches[key] = cache
        for layer in cache.layers:
            layer.cumulative_length.zero_()
        return cache

    def _new_cache(self, rows: int, length: int):
        from transformers import StaticCache

        config = self.lm.config.get_text_config(decoder=True)
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        parameter = next(self.lm.parameters())
        keys, values = self.buffers.get(rows, ([], []))
        if not keys or keys[0].shape[2] < length:  # grow: views of the old buffer go with it
            keys = [torch.zeros(rows, heads, length, head_dim, dtype=parameter.dtype, device=parameter.device)
                    for _ in range(config.num_hidden_layers)]
            values = [torch.zeros_like(k) for k in keys]
            self.buffers[rows] = (keys, values)
            self.caches = {key: c for key, c in self.caches.items() if key[0] != rows}
        cache = StaticCache(config=config, max_cache_len=length)
        if len(cache.layers) != len(keys) or any(getattr(layer, "is_sliding", False) for layer in cache.layers):
            raise NotImplementedError("generation_cache=static supports full-attention layers only")
        for layer, k, v in zip(cache.layers, keys, values):
            layer.keys, layer.values = k[:, :, :length], v[:, :, :length]
            layer.device, layer.batch_size, layer.num_heads = parameter.device, rows, heads
            layer.k_head_dim = layer.v_head_dim = head_dim
            layer.cumulative_length = torch.zeros((), dtype=torch.long, device=parameter.device)
            for tensor in (layer.keys, layer.values, layer.cumulative_length):
                torch._dynamo.mark_static_address(tensor)
            layer.is_initialized = True
        return cache

    def __deepcopy__(self, memo):
        return None  # buffers and compiled code belong to one model: a copied policy builds its own

    def __call__(self, **kwargs):
        if self.compiled and self.on_cuda:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs have been read
        return self.step(**kwargs)


@torch.no_grad()
def generate_turns(lm, contexts: list[list[int]], max_new_tokens: int, end_id: int, pad_id: int,
                   temperature: float, generator: torch.Generator, decoder: StaticDecoder | None = None) -> list[Turn]:
    """Sample one turn for each context (ids so far), batched: left-padded prefill, then cached decoding
    (through `decoder`'s static cache when given)."""
    if decoder is not None:
        return _generate_static(decoder, contexts, max_new_tokens, end_id, pad_id, temperature, generator)
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
    return _turns(tokens, logps, end_id)


def _generate_static(decoder: StaticDecoder, contexts: list[list[int]], max_new_tokens: int, end_id: int,
                     pad_id: int, temperature: float, generator: torch.Generator) -> list[Turn]:
    """generate_turns on fixed shapes: the batch padded to decoder.rows(B) with copies of the last context,
    the cache and the attention mask [rows, length] allocated for prefill + max_new_tokens up front."""
    lm = decoder.lm
    device = next(lm.parameters()).device
    B, L = len(contexts), max(len(c) for c in contexts)
    rows, length = decoder.rows(B), decoder.length(L + max_new_tokens)
    contexts = contexts + [contexts[-1]] * (rows - B)
    ids = torch.full((rows, L), pad_id, dtype=torch.long)
    attention = torch.zeros(rows, length, dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, L - len(context):] = torch.tensor(context)
        attention[row, L - len(context):] = 1  # and every later slot: causality hides those not yet written
    ids, attention = ids.to(device), attention.to(device)
    positions = (attention[:, :L].cumsum(1) - 1).clamp_(min=0)
    cache = decoder.cache(rows, length)
    out = lm(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, cache=cache,
             logits_to_keep=1)  # the prefill runs eagerly (its shape changes every turn)
    next_position = positions[:, -1:] + 1
    tokens, logps = [], []
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        token, logp = sample_next(out.logits[:B, -1], temperature, generator)  # real rows only
        tokens.append(token)
        logps.append(logp)
        ended |= token == end_id
        if bool(ended.all()) or step + 1 == max_new_tokens:
            break
        feed = torch.cat([token, token[-1:].expand(rows - B)]) if rows > B else token
        out = decoder(input_ids=feed[:, None], attention_mask=attention, position_ids=next_position,
                      use_cache=True, cache=cache)
        next_position = next_position + 1
    return _turns(tokens, logps, end_id)


def _turns(tokens: list[torch.Tensor], logps: list[torch.Tensor], end_id: int) -> list[Turn]:
    """Per-row Turns from the per-step [B] tensors, each cut after its first end_id."""
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
                         generation_batch: int = 0, decoder: StaticDecoder | None = None) -> list[Trajectory]:
    """Run every env to its end with `lm` acting through its chat front-end; one Trajectory per env
    (`decoder`: decode through its static cache instead of a DynamicCache)."""
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
                                   pad_id, temperature, generator, decoder)
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


def sample_policy_episodes(policy, tokenizer, envs: list, groups: list[int], temperature: float,
                           generator: torch.Generator) -> list[Trajectory]:
    """A chat policy's episodes (policy/qwen3.QwenPolicy: its causal LM `lm`, token path `path` and
    PolicyConfig `cfg`), sampled with the LM in eval mode (HF turns the cache off under gradient
    checkpointing in train mode); `tokenizer` is unused: the token path encodes."""
    was_training = policy.lm.training
    policy.lm.eval()
    try:
        return sample_chat_episodes(policy.lm, policy.path, envs, groups, temperature, generator,
                                    policy.cfg.max_new_tokens, policy.cfg.max_len, policy.cfg.generation_batch,
                                    static_decoder_of(policy))
    finally:
        policy.lm.train(was_training)


def static_decoder_of(policy) -> StaticDecoder | None:
    """The policy's StaticDecoder under policy.generation_cache=static, kept in `policy.static_decoder`
    across steps (its buffers and compiled step are reused; a deep copy of the policy builds its own),
    else None (a DynamicCache per turn)."""
    if getattr(policy.cfg, "generation_cache", "dynamic") != "static":
        return None
    compile_step = bool(getattr(policy.cfg, "compile_decode", False))
    decoder = getattr(policy, "static_decoder", None)
    if decoder is None or decoder.lm is not policy.lm or decoder.compiled != compile_step:
        decoder = policy.static_decoder = StaticDecoder(policy.lm, compile_step)
    return decoder
