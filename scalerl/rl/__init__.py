"""The RL objective library: pure functions over tensors and scored groups.

    advantages      group-centred advantages, batch / prompt / no normalisation, leave-one-out
    curriculum      No-Positive-Resampling and the prompt sampler that honours it
    losses          cispo, ppo_clip, gspo, reinforce; prompt / sample / token aggregation
    length_penalty  DAPO soft overlong punishment (reward shaping)
    logprobs        chosen-token log-probs through a chunked FP32 LM head

Modules import torch; import them directly (this package init imports nothing).
"""
