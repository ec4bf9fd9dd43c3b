"""Thin Lambda / Fargate entry points. The work lives in the other subpackages."""
