"""Authorization of API requests: kube's request attributes, RBAC, impersonation and access reviews."""
