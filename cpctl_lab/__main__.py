"""``python -m cpctl_lab``: the lab CLI without going through cpctl's main entry point."""

from .cli import lab

if __name__ == "__main__":
    lab(prog_name="cpctl lab")
