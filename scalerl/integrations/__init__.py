"""scalerl's forecast inside other frameworks' trainers (`scalerl.integrations.trl`: a
transformers `TrainerCallback` for TRL's trainers). Each module imports its framework only where
it is used; the rest of scalerl never imports this package."""
