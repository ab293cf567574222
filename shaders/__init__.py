"""GLSL compute shaders (`*.comp`); a package only so that they ship as package data."""
