"""Kubernetes semantics, pure: quantities, object names, image references, label selectors, a pod's
resources as the API server and scheduler compute them, and ResourceQuota scopes and charging."""
