import sys

__all__: "list[str]" = []

if __name__ == "__main__":
    try:
        from ascend_env.cli import entry_point
    except KeyboardInterrupt:  # Ctrl-C while ascend-env itself loads: nothing was changed yet
        sys.stderr.write("ascend-env: interrupted while starting; nothing was changed.\n")
        sys.exit(130)
    entry_point()
