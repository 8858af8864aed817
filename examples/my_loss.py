"""A policy loss of your own, loaded by path as a custom reward is (docs/recipes.md, "Your own loss"):

    scalerl train --set loss.type=custom --set loss.function=examples/my_loss.py:truncated_is \
        --set loss.options='{eps_max: 5.0}'

scalerl calls it once per micro-batch with keyword tensors (N completions x T tokens, 0 where masked)
and aggregates what it returns by `loss.aggregation` (prompt, sample or token), then minimises minus
that. Nothing here imports scalerl.

This one is CISPO (the ScaleRL paper's Eq. 4): the importance ratio pi / pi_gen, truncated at
eps_max and detached, weighs A * log pi; every token keeps a gradient.
"""

import torch


def truncated_is(
    logprobs: torch.Tensor,
    gen_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_max: float = 5.0,
) -> torch.Tensor:
    """The per-token objective J_t (N, T) to maximise.

    logprobs      (N, T) the trainer's log pi of each sampled token, with grad
    gen_logprobs  (N, T) the generator's log-probs of the same tokens, recorded when it sampled them
    advantages    (N,)   one advantage per completion
    mask          (N, T) 1.0 on the tokens that train, 0.0 on padding and forced tokens
    """
    ratio = torch.exp(logprobs - gen_logprobs)
    weight = torch.clamp(ratio, max=eps_max).detach()
    return weight * advantages.unsqueeze(1) * logprobs * mask
