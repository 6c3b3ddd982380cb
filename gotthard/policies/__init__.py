"""Security policies (Rego), their evaluation engines and the kube-bench CIS baseline."""
