"""Least-privilege etcd access: the plan (pure) and its application."""
