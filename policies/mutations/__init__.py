"""One mutation per module; each exports one class implementing ``policies.base.Mutation``."""
