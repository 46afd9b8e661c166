"""The old spelling ``python -m mqctl.node``, kept working: the node process is ``mqctl.nodes.node``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("mqctl.nodes.node", run_name="__main__", alter_sys=True)
