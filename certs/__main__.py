"""``python -m certs`` is ``mpijob-webhook certs``."""
import sys

from webhook.cli import main

sys.exit(main(["certs", *sys.argv[1:]]))
