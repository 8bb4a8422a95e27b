"""A head-role survey over a corpus: sequences (corpus.py) cut into shards scored by workers
(workers.py: a local process pool; ray_runner.py: Ray actors), stored as Parquet (shards.py) and
summarized with bootstrap intervals (summary.py); survey.py runs it."""
