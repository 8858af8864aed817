"""Builds a run, below the loop: everything `scalerl.loop.train` trains with.

    resources   how the cores are divided (`Threads`), the devices a run holds, where the generator
                runs (`generator_host`: as the engine's declaration allows)
    generator   `Components` (model, tokenizer, task, reward, the generator builder) and
                `build_generator`, which a generator process or a Ray actor unpickles and runs
    state       `Trainer`: model, optimizer, curriculum, typed `Counters`; checkpoint and restore
    modes       the configured off-policy mode over its transport (thread, process, Ray): a `Mode`
    ranks       the trainer's ranks (`trainer.strategy`): the step `Trainer.train_on` runs
    ray_session connects to a Ray cluster or starts a local one (imports Ray)
    ray         `ray_mode`, PipelineRL-k over generator actors (imports Ray: only for `pipeline.backend: ray`)
    run         `build_run`: all of the above, in order, as one `Run`
"""
