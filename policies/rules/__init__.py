"""One validation rule per module; each exports one class implementing ``policies.interface.Rule``."""
