"""Runs eole's command line (`eole train ...`, `eole predict ...`) with PyTorch's thread pools set
first. eole 0.6.4 has no setting for them, so run.py starts it through this file, in eole's own
environment:

  python launch.py INTRA_OP_THREADS INTER_OP_THREADS train -config train.yaml

0 leaves a pool at PyTorch's default (intra-op: the number of physical cores).
"""
import sys


def main():
    intra_threads, inter_threads = int(sys.argv[1]), int(sys.argv[2])
    import torch
    if intra_threads > 0:
        torch.set_num_threads(intra_threads)
    if inter_threads > 0:
        torch.set_num_interop_threads(inter_threads)
    print(f"torch {torch.__version__}: {torch.get_num_threads()} intra-op and "
          f"{torch.get_num_interop_threads()} inter-op threads", flush=True)
    from eole.bin.main import main as eole_main
    sys.argv = ["eole"] + sys.argv[3:]
    eole_main()


if __name__ == "__main__":
    main()
