"""The RL loops: PipelineRL-k and PPO-off-policy-k over a generator, a transport and the step.

Entry point: `scalerl.pipeline.train.train(cfg, run_dir)`; `scalerl train` wraps it
(`scalerl.pipeline.launch.run_training`).
"""
