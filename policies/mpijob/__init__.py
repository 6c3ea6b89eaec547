"""The MPIJob (kubeflow.org/v2beta1) itself: reading it the way the MPI operator does, the CRD type
check, pruning and defaulting as the API server does them, and the findings about its fields."""
