"""Evaluation: n-best reading, writing, reranking and weight tuning (`nbest`), corpus and task metrics
(`metrics`), fine-tuning task data (`tasks`) and BLiMP minimal pairs (`blimp`). Scores come in as plain numbers,
so nothing here needs a model or torch."""
