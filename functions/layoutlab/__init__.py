"""layoutlab: make Earth-science arrays fast to read from object storage, and prove it."""

__version__ = "0.1.0"
