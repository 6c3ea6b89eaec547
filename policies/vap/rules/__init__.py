"""The CEL of each exported rule, one module per rule (named like the rule's own module in
``policies.rules``). Each has ``RULE`` (the rule id) and ``validations()``."""
