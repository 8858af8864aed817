"""Scale-out on Ray: generator actors (`rollouts`), data-parallel trainer ranks (`data_parallel`),
and the `pipeline.backend: ray` mode that ties them into the training loop (`backend`)."""
