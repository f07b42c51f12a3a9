"""What users touch: the command line, the pytest mixin and plugin, exports, the badge, replay and the in-world mode."""
