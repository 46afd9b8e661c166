"""The pluggy markers of mqctl's hooks: the project name, ``hookspec`` and ``hookimpl``.

They sit at the bottom of core/ so any room can implement a hook (long polling listens to
dispatch) without importing the hook contracts, which name types from the rooms above.
"""

from __future__ import annotations

import pluggy

PROJECT = "mqctl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
