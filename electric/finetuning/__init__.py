"""Fine-tuning's library side: its configuration (`config.FinetuneConfig`) and its tasks (`tasks`: the registry of
benchmark tasks, readers for their files and a user's own, label vocabularies, dev splits, metrics)."""
