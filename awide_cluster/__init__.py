"""awide-cluster: the card-cluster daemon and operator CLI. Importing this has no side effects."""

__version__ = "0.2.0"
