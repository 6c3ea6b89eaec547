"""``python3 -m bench run [--quick] [...]`` (see ``bench.run``) and
``python3 -m bench profile /validate [...]`` (see ``bench.profile``) and
``python3 -m bench overhead [...]`` (see ``bench.overhead``) and
``python3 -m bench parts [...]`` (see ``bench.parts``) and
``python3 -m bench instructions [...]`` (see ``bench.instructions``) and
``python3 -m bench soak [--quick] [...]`` (see ``bench.soak``)."""
from __future__ import annotations

import sys

USAGE = """usage: python3 -m bench run [--quick] [--json FILE] [...]   load test against the floor
       python3 -m bench profile /validate [...]             where one request's time goes
       python3 -m bench overhead [...]                      in-process CPU per request, ours vs the floor
       python3 -m bench parts [...]                         what each rule, mutation and observer costs in a request
       python3 -m bench instructions [...]                  instructions per request, ours vs the floor (valgrind)
       python3 -m bench soak [--quick] [...]                the server under hostile clients, against its targets
(add --help to either for the options)"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("run", "profile", "overhead", "parts", "instructions", "soak"):
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] == "run":
        from bench.run import main as command
    elif argv[0] == "profile":
        from bench.profile import main as command
    elif argv[0] == "overhead":
        from bench.overhead import main as command
    elif argv[0] == "parts":
        from bench.parts import main as command
    elif argv[0] == "soak":
        from bench.soak import main as command
    else:
        from bench.instructions import main as command
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
