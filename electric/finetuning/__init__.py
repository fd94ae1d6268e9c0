"""Fine-tuning's library side: its configuration (`config.FinetuneConfig`)."""
