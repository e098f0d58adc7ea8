"""Tests of the compiled kernels against the plain-Python references in reference.py."""
