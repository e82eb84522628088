"""The GPU scripts' command line as one convention: bad input is one line naming the script on
stderr and exit 2, never a stack trace (largest_batch.py, smallest_budget.py)."""
import sys


def failer(prog):
    """fail(msg): `prog: msg` on stderr, exit 2."""
    def fail(msg):
        print(f"{prog}: {msg}", file=sys.stderr)
        sys.exit(2)
    return fail


def positive(fail, text, name, kind=int):
    """`text` as a positive `kind`, or fail saying --name takes one."""
    try:
        v = kind(text)
    except ValueError:
        v = None
    if v is None or v <= 0:
        fail(f"--{name} takes a positive number, not {text!r}")
    return v


def parse(ap, argv):
    """argparse's answer; its own errors exit 2 (its --help 0), as every other bad input."""
    try:
        return ap.parse_args(argv)
    except SystemExit as e:
        sys.exit(2 if e.code else 0)
