"""CDK entry point of the reference app (`cdk synth`, `cdk deploy InferenceStack`).

`cdk synth -c platform=FILE` builds another platform file than deployments.yaml; a bad file
ends in one `error:` line and exit code 2 (see eks_inference.stacks.entry).

cdk.json runs this file with the shell's `python3`, which outside the project's environment
lacks its dependencies: the app then runs itself again with the project's `.venv` (what
`make setup` makes), or says in one line how to make it. The first lines use the standard
library only, for that reason.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
VENV_PYTHON = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run_in_project_environment() -> None:
    """Re-run this app with the project's environment unless it runs there already; exit 2
    with one line when there is none and this interpreter cannot import the library."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if VENV_PYTHON.exists():
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
    try:
        import eks_inference  # noqa: F401
    except ImportError as error:
        print(
            f"error: {sys.executable} cannot run the app ({error}) and {VENV} does not exist; "
            f"run `make setup` in {HERE} to create it, then run cdk again",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


if __name__ == "__main__":
    run_in_project_environment()

    from eks_inference.stacks.entry import main

    main(default_platform=HERE / "deployments.yaml")
