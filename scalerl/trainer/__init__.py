"""The trainer: one optimizer step over the step's groups (`step`), for one worker, for N
data-parallel workers with an all-reduce (`data_parallel`) or for N FSDP2 ranks holding shards
(`sharded`), through the trainer's forward (`forward`: shared-prompt attention, chunked FP32 LM
head). Modules import torch."""
