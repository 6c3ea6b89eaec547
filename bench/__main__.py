"""One dispatcher for the benchmarks:

    python3 -m bench run [--quick | --smoke] [...]          the load test against the floor, and the growth tables
    python3 -m bench profile --mode MODE [...]              the in-process views, one MODE at a time:
        calls          where one request's time goes: a call tree (see ``bench.profile``; the default)
        overhead       CPU per request, ours vs the floor's app (see ``bench.overhead``)
        parts          what each rule, mutation, input check and observer costs in a request (``bench.parts``)
        instructions   instructions and cache misses per request under valgrind (``bench.instructions``)
        served-instructions  the same of a served request, the server under valgrind
                       (``bench.served_instructions``)
    python3 -m bench soak [--quick] [...]                   the server as deployed under hostile clients, against its targets
                                                            (see ``bench.soak``)
    python3 -m bench e2e [--smoke] [...]                    what admission adds to an MPIJob create on a real API server:
                                                            none, the exported policies, a bare webhook, ours
                                                            (KUBEBUILDER_ASSETS; see ``bench.e2e``)
"""
from __future__ import annotations

import sys
from collections.abc import Callable

MODES = ("calls", "overhead", "parts", "instructions", "served-instructions")
USAGE = f"""usage: python3 -m bench run [--quick | --smoke] [--json FILE] [...]   load test against the floor, growth tables
       python3 -m bench profile [--mode {{{','.join(MODES)}}}] [...]      in-process: where a request's time goes
       python3 -m bench soak [--quick] [...]                the server under hostile clients, against its targets
       python3 -m bench e2e [--smoke] [...]                 on a real API server (KUBEBUILDER_ASSETS): what admission adds
(add --help to either for the options)"""


def _mode(argv: list[str]) -> tuple[str, list[str]]:
    """The --mode of ``profile`` (default calls) and the arguments left for that mode."""
    rest, mode = [], "calls"
    iterator = iter(argv)
    for arg in iterator:
        if arg == "--mode":
            mode = next(iterator, "")
        elif arg.startswith("--mode="):
            mode = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return mode, rest


def _command(mode: str) -> Callable[[list[str]], int]:
    if mode == "calls":
        from bench.profile import main
    elif mode == "overhead":
        from bench.overhead import main
    elif mode == "parts":
        from bench.parts import main
    elif mode == "instructions":
        from bench.instructions import main
    else:
        from bench.served_instructions import main
    return main


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        from bench.run import main as run

        return run(argv[1:])
    if argv[:1] == ["profile"]:
        mode, rest = _mode(argv[1:])
        if mode not in MODES:
            print(f"python3 -m bench profile: --mode must be one of {', '.join(MODES)}, not {mode!r}", file=sys.stderr)
            return 2
        return _command(mode)(rest)
    if argv[:1] == ["soak"]:
        from bench.soak import main as soak

        return soak(argv[1:])
    if argv[:1] == ["e2e"]:
        from bench.e2e import main as end_to_end

        return end_to_end(argv[1:])
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
