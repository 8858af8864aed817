"""Builds a run, below the loop: everything `scalerl.loop.train` trains with.

resources   how the cores are divided (`Threads`), the devices a run holds, where the generator
            runs (`generator_host`: as the engine's declaration allows)
generator   `Components` (model, tokenizer, task, reward, the generator builder) and
            `build_generator`, which a generator process or a Ray actor unpickles and runs
modes       `make_mode`: the run's source of scored groups (a `RolloutSource`: a thread, a process or
            Ray actors under PipelineRL-k, or PPO-off-policy-k's rounds)
ranks       the Ray a run needs (a session; the Ray backend's placement) for its actors
ray_session connects to a Ray cluster or starts a local one (imports Ray)
run         `build_run`: all of the above, the `Trainer` (scalerl.trainer.state) with its step
            strategy, and the typed evaluation (`scalerl.evaluate.Evaluator`), in order, as one `Run`
"""
