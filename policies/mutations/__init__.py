"""One mutation per module; each exports one class implementing ``policies.base.Mutation``.

Each class also declares ``fields``: the paths (map keys from the object's root) of every field
it reads or writes, whose types ``policies.mutations.shape`` checks before any mutation runs.
"""
