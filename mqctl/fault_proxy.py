"""The old spelling ``python -m mqctl.fault_proxy``, kept working: the proxy is ``mqctl.chaos.fault_proxy``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("mqctl.chaos.fault_proxy", run_name="__main__", alter_sys=True)
