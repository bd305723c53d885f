"""Plug-ins: stages, sinks, samplers, artifact kinds and algorithms from `.py` files and installed
packages, through one mechanism (`registry.py`); `evoforge plugins` lists them."""

from evoforge.stages.plugins.listing import plugin_rows
from evoforge.stages.plugins.registry import SINKS, STAGES, PluginError, use_plugins
from evoforge.stages.plugins.run_sinks import plugin_sinks

__all__ = ["SINKS", "STAGES", "PluginError", "plugin_rows", "plugin_sinks", "use_plugins"]
