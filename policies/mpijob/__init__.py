"""The MPIJob (kubeflow.org/v2beta1): reading it as the MPI operator does."""
