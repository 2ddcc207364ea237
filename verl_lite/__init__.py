"""verl_lite: a Ray-based, single-controller reinforcement-learning framework for language models.

Importing the top-level package is cheap: submodules (``verl_lite.algorithms``,
``verl_lite.single_controller``, ``verl_lite.kv`` ...) are imported where they are used.
"""

__version__ = "0.1.0"
