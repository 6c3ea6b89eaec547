"""Kubeflow Trainer v2 ``TrainJob``s on an MPI runtime: reading the objects (``api``), telling
the API shape apart (``api``), the strategic merge the controller patches templates with
(``strategic_merge``) and the job the Trainer controller will build (``effective_job``).

Pure like the rest of ``policies``: the runtime comes in as a plain dict, looked up by the
caller in the cluster view.
"""
