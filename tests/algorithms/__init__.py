"""Tests for verl_lite.algorithms (a package, so test module names cannot clash with other test folders)."""
