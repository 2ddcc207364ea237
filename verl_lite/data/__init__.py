"""Datasets of verl_lite: the synthetic arithmetic task, its tokenizer, and SFT / reward-model batches.

Submodules are imported on demand (``from verl_lite.data.synthetic import compute_score``) so that
importing the scorer does not pull in transformers.
"""
