import sys

from ascend_env.cli import main

if __name__ == "__main__":
    sys.exit(main())
