"""``python -m eks_inference``: the same CLI as the ``eks-inference`` console script."""

from eks_inference.cli.main import main

if __name__ == "__main__":
    main()
