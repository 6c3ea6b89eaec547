"""Subcommands of ``mpijob-webhook``; see webhook.cli.COMMANDS."""
