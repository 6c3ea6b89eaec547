"""One mutation per module; each exports one class implementing ``policies.interface.Mutation``.

Each class also declares ``fields``: the paths (map keys from the object's root) of every field
it reads or writes, whose types ``policies.mutations.mutated_fields_check`` checks before any mutation runs.
"""
