"""Kubeflow Trainer v2 ``TrainJob``s on an MPI runtime.

- ``api``: reading TrainJobs and runtimes, and telling the API shapes (v2.1, v2.2, v2.3) apart;
- ``type_check``: the types of the TrainJob fields the webhook reads, checked first;
- ``strategic_merge``: the Kubernetes strategic merge the controller patches templates with;
- ``effective_job``: the job the Trainer controller will build from a TrainJob and its runtime;
- ``effective_job_memo``: effective jobs remembered per runtime and TrainJob spec, shared frozen;
- ``read_only``: read-only copies of JSON maps and lists (what the memo hands out);
- ``trainjob_workload``: the MPI workload view of it, which the workload rules read;
- ``trainjob_review``: a request's runtime, shape and effective job, handed to rules and mutations;
- ``own_patch``: the one patch entry the mutations write into.

Pure like the rest of ``policies``: the runtime comes in as a plain dict, looked up by the
caller in the cluster view.
"""
