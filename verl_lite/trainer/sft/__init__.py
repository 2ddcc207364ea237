"""Supervised fine-tuning and reward-model training on the single controller (``main_sft``, ``main_rm``).

Submodules are imported where used, so importing this package stays cheap.
"""
