"""What the tests and the benchmarks share: the in-test Kubernetes API server, the real server over
TLS, builders of MPIJobs, reviews and cluster objects, the CRD schema check, the in-process Flask
client and the recorded reference data. Never imported by what ships (webhook, policies, certs)."""
