"""``python -m pdm_replay`` (also what ``torchrun -m pdm_replay`` starts)."""

from pdm_replay.cli import main

if __name__ == "__main__":
    main()
